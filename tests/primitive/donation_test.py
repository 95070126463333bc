"""Donated payloads: entangle adds no copy; XLA copies what it must keep."""

import warnings

import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle
from entangle_jax.testing import read_slot, write_slot
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

  def test_donated_token_without_a_matching_output_is_copied(self):
    # docs/copies.md: JAX pairs a donated argument only with an output
    # of its shape and dtype; without one the token is read-only to XLA.
    def returns_read(t):
      x = read_slot(t)
      write_slot(entangle(t, x), 2.0)
      return x

    def returns_token(t):
      x = read_slot(t)
      return entangle(t, x), x

    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # "Some donated buffers were not usable"
      self.assertEqual(copies(returns_read, jnp.int32(0), donate_argnums=0), 1)
    self.assertEqual(copies(returns_token, jnp.int32(0), donate_argnums=0), 0)

  def test_copy_into_a_donated_output_is_not_entangles(self):
    # A native result returned in the donated buffer's place is copied there,
    # with or without entangle: the same count both ways.
    def with_entangle(t):
      x = read_slot(t)
      return write_slot(entangle(t, x), 2.0), x

    def without(t):
      x = read_slot(t)
      return write_slot(t, 2.0), x

    args = (jnp.int32(0),)
    self.assertEqual(
      copies(with_entangle, *args, donate_argnums=0),
      copies(without, *args, donate_argnums=0),
    )


if __name__ == "__main__":
  absltest.main()
