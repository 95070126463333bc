"""NumPy masked arrays as leaves: rejected, with JAX's advice kept.

JAX refuses masked arrays (their mask would be dropped silently) and says
what to do instead, `arr.filled()`. Eagerly entangle converts leaves itself,
so its `TypeError` must name the leaf and keep that advice, on one line.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import entangle


def _masked():
  return np.ma.masked_array([1.0, 2.0], mask=[False, True])


class MaskedArrayLeafTest(absltest.TestCase):
  def test_eager_message_names_leaf_and_says_filled(self):
    with self.assertRaises(TypeError) as raised:
      entangle(jnp.ones(2), {"m": _masked()})
    message = str(raised.exception)
    self.assertIn("witnesses[0]['m']", message)
    self.assertIn("arr.filled()", message)
    self.assertNotIn("\n", message)

  def test_eager_payload_leaf(self):
    with self.assertRaisesRegex(TypeError, r"payload\[1\].*arr\.filled\(\)"):
      entangle([jnp.ones(2), _masked()], jnp.ones(2))

  def test_jit_gives_the_same_advice(self):
    # Control: under jit JAX's own message gives the advice, so the eager
    # message is what differed.
    with self.assertRaisesRegex(ValueError, r"arr\.filled\(\)"):
      jax.jit(entangle)(jnp.ones(2), {"m": _masked()})

  def test_filled_array_is_accepted(self):
    result = entangle(_masked().filled(0.0), jnp.ones(2))
    np.testing.assert_array_equal(result, [1.0, 0.0])


if __name__ == "__main__":
  absltest.main()
