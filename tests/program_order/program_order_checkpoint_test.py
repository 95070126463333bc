"""`in_program_order` and ``jax.checkpoint`` around a native read under
``grad`` (issue 51, case 5): a native call's result is saved, never
recomputed, since a call made again in the backward pass runs after the
later write and sees a later state.

Before: ``in_program_order(jax.grad(f))`` ordered the recomputed read after
the later write (the gradient 15 where 3 is right, with ``races() == []``);
on jax 0.12, ``jax.grad(in_program_order(f))`` also gave 15, with a race.

Each test has its control: the same gradient without the transform reads
the later value and races.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import in_program_order, testing

SLOT = 40
RUNS = 10


def read_in_checkpoint(x, slot):
  """``x * (what the slot holds)`` in a checkpoint, between writes of 3 and
  15: the gradient is 3."""
  del slot  # A constant slot: XLA does not merge the two reads.
  testing.write_slot(SLOT, 3.0)
  y = jax.checkpoint(lambda x: x * testing.read_slot(SLOT, delay_us=1000))(x)
  testing.write_slot(SLOT, 15.0)
  return y


def read_of_a_token(x, slot):
  """The read takes the write's token, through the checkpoint's inputs;
  a policy of the user's own: the gradient is ``3 cos(x)``."""
  token = testing.write_slot(slot, 3.0)
  y = jax.checkpoint(
    lambda x, t: jnp.sin(x) * testing.read_slot(t + 0, delay_us=1000),
    policy=jax.checkpoint_policies.dots_saveable,
  )(x, token)
  testing.write_slot(token, 15.0)
  return y


def outside(f):
  return in_program_order(jax.grad(f))


def inside(f):
  return jax.grad(in_program_order(f))


class CheckpointTest(parameterized.TestCase):
  @parameterized.product(
    (
      {"f": read_in_checkpoint, "expected": 3.0},
      {"f": read_of_a_token, "expected": 3 * np.cos(1.0)},
    ),
    order=(outside, inside),
  )
  def test_the_gradient_reads_what_the_forward_pass_read(
    self, f, expected, order
  ):
    args = (jnp.float32(1.0), jnp.int32(SLOT))
    racy = jax.jit(jax.grad(f)).lower(*args).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    if f is read_in_checkpoint:  # Read again after the write of 15.
      self.assertEqual(float(racy(*args)), 15.0)
    fixed = jax.jit(order(f)).lower(*args).compile()
    self.assertEqual(testing.races(fixed), [])
    got = [float(fixed(*args)) for _ in range(RUNS)]
    np.testing.assert_allclose(got, [expected] * RUNS, rtol=1e-5)

  def test_without_grad_the_checkpoint_computes_as_before(self):
    args = (jnp.float32(2.0), jnp.int32(SLOT))
    fixed = jax.jit(in_program_order(read_in_checkpoint))
    self.assertEqual(testing.races(fixed.lower(*args).compile()), [])
    self.assertEqual(float(fixed(*args)), 6.0)


if __name__ == "__main__":
  absltest.main()
