"""Tests of entangle across devices and processes: sharded jit,
shard_map, jax.export and jax.distributed."""
