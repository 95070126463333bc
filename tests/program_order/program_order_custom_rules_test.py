"""`in_program_order` orders the calls of a custom_jvp's JVP rule and a
custom_vjp's forward pass as the primal's (issue 51, case 3): under
differentiation they run in the primal's place. Before, the order value
came in after the earlier calls the primal's calls conflict with only, so
a rule that writes what the primal only reads ran before the earlier reads
(16 races of 16 hazards, jax 0.10.2 and 0.12.0.1).

Each test has its control: the same program without the transform races.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import in_program_order, testing

HAZARDS = 16
RUNS = 10


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def jvp_writes(x, slot):
  """Reads the slot; its JVP rule writes 2 into it instead."""
  return x * testing.read_slot(slot)


@jvp_writes.defjvp
def _jvp(slot, primals, tangents):
  (x,), (dx,) = primals, tangents
  token = testing.write_slot(slot, 2.0)
  return x + token * 0, dx


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def forward_writes(x, slot):
  """Reads the slot; its forward pass writes 2 into it instead."""
  return x * testing.read_slot(slot)


def _fwd(x, slot):
  token = testing.write_slot(slot, 2.0)
  return x + token * 0, None


forward_writes.defvjp(_fwd, lambda slot, res, ct: (ct,))


def program(rule_call):
  """Per hazard: write 1, a slow read (of 1), then the call whose rule
  writes 2. Returns ``(x, reads)``."""

  def f(x, big):
    reads = []
    for i in range(HAZARDS):
      testing.write_slot(i, 1.0)
      reads.append(testing.read_slot(i, delay_us=1000))
      x = rule_call(x, i)
    return x + 0 * jnp.sin(big).sum(), jnp.stack(reads)

  return f


def under_grad(f):
  return jax.grad(f, has_aux=True)


def under_jvp(f):
  def g(x, big):
    return jax.jvp(f, (x, big), (jnp.float32(1.0), jnp.zeros_like(big)))[0]

  return g


class CustomRulesTest(parameterized.TestCase):
  @parameterized.product(
    rule_call=(jvp_writes, forward_writes), transform=(under_grad, under_jvp)
  )
  def test_the_rules_calls_come_after_earlier_reads(self, rule_call, transform):
    args = (jnp.float32(1.0), jnp.ones(1 << 16))
    f = program(rule_call)
    racy = jax.jit(transform(f)).lower(*args).compile()
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = jax.jit(transform(in_program_order(f))).lower(*args).compile()
    self.assertEqual(testing.races(fixed), [])
    wrong = sum(
      int(np.sum(np.asarray(fixed(*args)[1]) != 1.0)) for _ in range(RUNS)
    )
    self.assertEqual(wrong, 0)


if __name__ == "__main__":
  absltest.main()
