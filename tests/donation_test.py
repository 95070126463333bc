"""Donated payloads: entangle adds no copy; XLA copies what it must keep."""

import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle
from tests.test_util import copies


def entangled(x, w):
  return entangle(x, w)


class DonationTest(absltest.TestCase):
  def test_donated_payload_is_not_copied(self):
    self.assertEqual(copies(entangled, jnp.ones(8), 1.0, donate_argnums=0), 0)

  def test_undonated_payload_is_copied(self):
    # The control: an argument XLA may not overwrite forces a copy, which is
    # what the donated case above avoids.
    self.assertEqual(copies(entangled, jnp.ones(8), 1.0), 1)

  def test_payload_still_used_later_is_copied(self):
    def reused(x, w):
      return entangle(x, w), x

    self.assertGreater(copies(reused, jnp.ones(8), 1.0, donate_argnums=0), 0)

  def test_intermediate_payload_is_not_copied(self):
    def chain(x, w):
      y = x * 2
      return entangle(y, w) + 1

    self.assertEqual(copies(chain, jnp.ones(8), 1.0), 0)


if __name__ == "__main__":
  absltest.main()
