"""Tests of what importing entangle_jax loads and registers, when, and the
private JAX API it relies on (each symbol guarded)."""
