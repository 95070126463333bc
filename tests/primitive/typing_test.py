"""Type checkers keep the payload's type through `entangle`.

`ty check` (CI runs it over the repository) verifies the `assert_type` calls
below: each fails type checking if `entangle` loses the payload's type, for
example if its return annotation became ``Any``. The test methods run the same
code, so the snippet also stays valid at run time.
"""

from typing import NamedTuple, assert_type

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle


class State(NamedTuple):
  token: jax.Array
  count: jax.Array


def step(state: State, x: jax.Array) -> State:
  """What a user writes: rebind the payload, keep its type."""
  state = entangle(state, x)
  assert_type(state, State)
  return state._replace(count=state.count + 1)


def tokens(token: jax.Array, witnesses: dict[str, jax.Array]) -> jax.Array:
  token = entangle(token, witnesses, 1.0)
  assert_type(token, jax.Array)
  return token


def pairs(pair: tuple[jax.Array, list[jax.Array]]) -> jax.Array:
  out = entangle(pair, pair[0])
  assert_type(out, tuple[jax.Array, list[jax.Array]])
  return out[1][0]


class TypingTest(absltest.TestCase):
  def test_snippet_runs(self):
    state = jax.jit(step)(State(jnp.int32(0), jnp.int32(1)), jnp.ones(2))
    self.assertEqual(int(state.count), 2)
    token = tokens(jnp.int32(3), {"w": jnp.ones(2)})
    self.assertEqual(int(token), 3)
    self.assertEqual(float(pairs((jnp.ones(()), [jnp.zeros(2)]))[0]), 0.0)


if __name__ == "__main__":
  absltest.main()
