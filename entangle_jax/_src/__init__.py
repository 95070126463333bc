"""entangle_jax's implementation: everything but the public names.

The public API is `entangle_jax` (entangle, Resource, export_safety_checks)
and `entangle_jax.testing`; nothing here is a stable interface.
"""
