"""`in_program_order` leaves an entangle out only where XLA must keep the
dependency (issue 51, case 2): a native call's result feeding the next call,
an entangle, a view of one value. Data flow that XLA simplifies away orders
nothing: a nested ``jit`` or ``checkpoint`` returning a tuple (each result
depends on its own inputs only), ``jnp.where(p, t, t)`` (is ``t``),
``t + int(v) * 0`` (is ``t``). Before, each result depended on every input
of its equation, and the write after the read took no entangle: wrong reads.

Each test has its control: the same program without the transform races.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import in_program_order, testing

RUNS = 10
HAZARDS = 12


def helper(token, value):
  return jnp.clip(token, 0, 63), value * 2


def through_jit(token, x):
  t, v = jax.jit(helper)(token, x)
  return t, v / 2


def through_checkpoint(token, x):
  t, v = jax.checkpoint(helper)(token, x)
  return t, v / 2


def through_where(token, x):
  return jnp.where(x > 0, token, token), x


def times_zero(token, x):
  return token + x.astype(jnp.int32) * 0, x


def hazards(step):
  """Twelve hazards: write 1, a slow read, then write 2 on a token that
  `step` computes from the write's token and the read's value (in the
  jaxpr, after the read; after XLA, maybe not)."""

  def f(big):
    reads = []
    for i in range(HAZARDS):
      token = testing.write_slot(i, 1.0)
      x = testing.read_slot(token, delay_us=1000)
      token, x = step(token, x)
      testing.write_slot(token, 2.0)
      reads.append(x)
    return jnp.stack(reads), jnp.sin(big).sum()

  return f


class DependenceTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("nested_jit", through_jit),
    ("checkpoint", through_checkpoint),
    ("where", through_where),
    ("times_zero", times_zero),
  )
  def test_the_write_after_the_read_is_ordered(self, step):
    big = jnp.ones(1 << 16)
    f = hazards(step)
    racy = jax.jit(f).lower(big).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = jax.jit(in_program_order(f)).lower(big).compile()
    self.assertEqual(testing.races(fixed), [])
    wrong = sum(
      int(np.sum(np.asarray(fixed(big)[0]) != 1.0)) for _ in range(RUNS)
    )
    self.assertEqual(wrong, 0)

  def test_a_view_of_a_result_needs_no_entangle(self):
    # A reshape or a sum with values that depend on no call keeps the order.
    def f(slot, offset):
      token = testing.write_slot(slot, 1.0)
      x = testing.read_slot(token.reshape((1,)) + offset)
      testing.write_slot(token, 2.0)
      return x

    args = (jnp.int32(3), jnp.zeros((1,), jnp.int32))
    c = jax.jit(in_program_order(f)).lower(*args).compile()
    self.assertEqual(testing.races(c), [])
    text = testing.module_text(c)
    self.assertEqual(
      text.count('custom_call_target="entangle_jax_entangle"'), 1
    )


if __name__ == "__main__":
  absltest.main()
