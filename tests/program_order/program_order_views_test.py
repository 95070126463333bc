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

from entangle_jax import in_program_order, testing

BASE = 48
HANDLES = np.arange(12, dtype=np.int32).reshape(3, 4) + BASE
RUNS = 10
from tests.program_order.views_targets import READ, WRITE, _read, _write  # noqa: E402, F401


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
