"""A downstream project orders two native calls with entangle_jax."""

import functools

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle, testing


def read_then_overwrite(slot, busywork, *, ordered):
  token = testing.write_slot(slot, jnp.float32(1.0))
  # The read waits on unrelated work (on an argument, so XLA cannot fold it
  # away), and without entangle the overwrite below runs first.
  delay = (jnp.sum(jnp.sin(busywork)) * 0).astype(jnp.int32)
  with jax.named_scope("read"):
    value = testing.read_slot(token + delay)
  if ordered:
    token = entangle(token, value)
  with jax.named_scope("overwrite"):
    testing.write_slot(token, jnp.float32(2.0))
  return value


def run(ordered: bool):
  """The compiled module and the values read in 200 runs."""
  fn = jax.jit(functools.partial(read_then_overwrite, ordered=ordered))
  args = (jnp.int32(0), jnp.ones(100_000))
  compiled = fn.lower(*args).compile()
  return compiled, [float(fn(*args)) for _ in range(200)]


class DownstreamTest(absltest.TestCase):
  def test_entangle_orders_the_read_before_the_overwrite(self):
    compiled, values = run(ordered=True)
    self.assertTrue(testing.happens_before(compiled, "read", "overwrite"))
    self.assertEqual(set(values), {1.0})

  def test_without_entangle_the_overwrite_can_come_first(self):
    compiled, values = run(ordered=False)
    self.assertFalse(testing.happens_before(compiled, "read", "overwrite"))
    self.assertIn(2.0, values)


if __name__ == "__main__":
  absltest.main()
