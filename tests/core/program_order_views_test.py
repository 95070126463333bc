"""`in_program_order` follows views of handle arrays element by element:
``jnp.ravel(order="F")`` is a reshape whose ``dimensions`` read the operand
in transposed order (issue 51, case 4: the transform read it in row-major
order, mapped elements to the wrong handles and left out the edges between
calls on one handle: 20 races of 24 with constant handles).

Each test has its control: the same program without the transform races.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax._src import native
from entangle_jax.testing import example_store

BASE = 48
HANDLES = np.arange(12, dtype=np.int32).reshape(3, 4) + BASE
RUNS = 10
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


def hazards(handles, big):
  """Per handle, in Fortran order: write 1 through the raveled view, a
  slow read, then write 2 through the handle array itself."""
  flat = jnp.ravel(handles, order="F")
  order = np.arange(12).reshape(3, 4).ravel(order="F")
  reads = []
  for i in range(12):
    token = _write(flat[i], jnp.float32(1.0))
    reads.append(_read(token, delay_us=np.int64(1000)))
    row, col = divmod(int(order[i]), 4)
    _write(handles[row, col], jnp.float32(2.0))
  return jnp.stack(reads), jnp.sin(big).sum()


def constant_handles(big):
  return hazards(jnp.asarray(HANDLES), big)


class ViewsTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("constant", constant_handles, False), ("traced", hazards, True)
  )
  def test_a_fortran_order_ravel_names_the_right_handles(self, f, traced):
    big = jnp.ones(1 << 16)
    args = (jnp.asarray(HANDLES), big) if traced else (big,)
    racy = jax.jit(f).lower(*args).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = jax.jit(in_program_order(f)).lower(*args).compile()
    self.assertEqual(testing.races(fixed), [])
    wrong = sum(
      int(np.sum(np.asarray(fixed(*args)[0]) != 1.0)) for _ in range(RUNS)
    )
    self.assertEqual(wrong, 0)


if __name__ == "__main__":
  absltest.main()
