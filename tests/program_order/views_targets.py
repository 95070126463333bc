"""Two targets on the example store declared with distinct elements, for
the in_program_order tests of views and of minimal ordering (a helper
module, not a test: Bazel's py_test of one test file cannot import another
test file)."""

import jax
import jax.numpy as jnp

import entangle_jax
from entangle_jax._src import native
from entangle_jax.testing import example_store

WRITE = "program_order_views_test_write"
READ = "program_order_views_test_read"
native.register_handlers(
  example_store._native, {"write_slot": WRITE, "read_slot": READ}, ["cpu"]
)
entangle_jax.declare_target(
  WRITE, mode="write", object=0, returns_object=[0], distinct_elements=True
)
entangle_jax.declare_target(READ, mode="read", object=0, distinct_elements=True)
_write = jax.ffi.ffi_call(
  WRITE, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
)
_read = jax.ffi.ffi_call(READ, jax.ShapeDtypeStruct((), jnp.float32))
