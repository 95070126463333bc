"""`distinct_elements` promises that different elements of an array of
handles are different objects. The promise holds for arrays the program
did not build (an argument, what a native call returned); an array that
ops of the program build from handles (a tile, a concatenate, an update,
a gather) can repeat one, and its elements may be one object."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import entangle, testing
from entangle_jax.testing import Declarations, TargetDeclaration
from tests.test_util import READ, WRITE

# The example store's targets, declared as a binding with one handle per
# element would declare them (tally's declarations).
DISTINCT = Declarations(
  targets=(
    TargetDeclaration(WRITE, "write", 0, (0,), True, source="test"),
    TargetDeclaration(READ, "read", 0, (), True, source="test"),
  )
)

BUILDS = {
  "tile": lambda hs: jnp.tile(hs, 2),
  "concatenate": lambda hs: jnp.concatenate([hs, hs]),
  "update": lambda hs: jnp.concatenate([hs.at[1].set(hs[0]), hs]),
  "gather": lambda hs: hs[jnp.array([0, 1, 0, 1])],
}


def loop(build):
  """Writes element 0 of the built array, then reads element 2, in a loop
  body (the read entangled with the loop's sum, so XLA cannot hoist it)."""

  def f(hs):
    hs2 = build(hs)

    def body(i, acc):
      testing.write_slot(hs2[0], 1.0)
      return acc + testing.read_slot(entangle(hs2[2], acc))

    return jax.lax.fori_loop(0, 3, body, 0.0)

  return f


def races(f, arg):
  c = jax.jit(f).lower(arg).compile()
  return testing.OrderAnalysis(c, declarations=DISTINCT).races()


class BuiltArraysTest(parameterized.TestCase):
  @parameterized.named_parameters(*BUILDS.items())
  def test_an_array_the_program_built_may_repeat_a_handle(self, build):
    hs = jnp.array([0, 1], jnp.int32)
    (race,) = races(loop(build), hs)
    self.assertEqual({race.first.target, race.second.target}, {WRITE, READ})
    # Why the promise cannot hold: element 2 of each is element 0.
    built = np.asarray(build(hs))
    self.assertEqual(built[2], built[0])

  def test_control_an_argument_keeps_the_promise(self):
    # The same loop on an array the caller passed: distinct elements are
    # distinct objects, as declared.
    hs4 = jnp.array([0, 1, 2, 3], jnp.int32)
    self.assertEqual(races(loop(lambda hs: hs), hs4), [])

  def test_control_without_the_declaration_it_races_either_way(self):
    hs4 = jnp.array([0, 1, 2, 3], jnp.int32)
    c = jax.jit(loop(lambda hs: hs)).lower(hs4).compile()
    self.assertNotEmpty(testing.races(c))


if __name__ == "__main__":
  absltest.main()
