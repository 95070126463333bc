"""`in_program_order` with a native call in a ``while_loop``'s condition:
the loop touches what its condition and its body touch, so calls after the
loop are ordered after the body's writes (issue 51, case 1: summarized by
the condition's calls alone, the loop hid the body's writes, and a read
after it saw the old value).

Each test has its control: the same program without the transform races.
"""

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import in_program_order, testing

SLOT = 36


def count_to_three(slot, big):
  """Writes 0, then 1, 2, 3 in a loop whose condition reads the slot; reads
  it after the loop. Each write in the body is slow, beside a large array:
  XLA:CPU runs the program concurrently."""
  testing.write_slot(slot, 0.0)

  def cond(c):
    return testing.read_slot(slot) < 3.0

  def body(c):
    testing.write_slot(slot, (c + 1).astype(jnp.float32), delay_us=1000)
    return c + 1

  n = jax.lax.while_loop(cond, body, jnp.int32(0))
  return testing.read_slot(slot), n, jnp.sin(big).sum()


def write_after_loop(slot):
  """A read before the loop, the loop's body writes, a write after it."""
  first = testing.read_slot(slot)

  def cond(c):
    return testing.read_slot(slot + 1) + c < 2.0

  def body(c):
    testing.write_slot(slot, c + 1.0)
    return c + 1.0

  c = jax.lax.while_loop(cond, body, jnp.float32(0))
  testing.write_slot(slot + 1, 5.0)
  return first, c


class WhileConditionTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.big = jnp.ones(1 << 16)

  def test_a_read_after_the_loop_sees_the_body_writes(self):
    args = (jnp.int32(SLOT), self.big)
    racy = jax.jit(count_to_three).lower(*args).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed_fn = jax.jit(in_program_order(count_to_three))
    self.assertEqual(testing.races(fixed_fn.lower(*args).compile()), [])
    reads = [float(fixed_fn(*args)[0]) for _ in range(10)]
    self.assertEqual(reads, [3.0] * 10)

  def test_calls_around_the_loop_are_ordered_against_the_body(self):
    slot = jnp.int32(SLOT + 2)
    racy = jax.jit(write_after_loop).lower(slot).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = jax.jit(in_program_order(write_after_loop)).lower(slot).compile()
    self.assertEqual(testing.races(fixed), [])


if __name__ == "__main__":
  absltest.main()
