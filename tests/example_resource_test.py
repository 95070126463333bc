"""The example native resource: slots written and read through XLA."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import testing
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)


class ExampleResourceTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    testing.reset_slots()

  def test_write_then_read(self):
    token = testing.write_slot(5, 2.5)
    self.assertEqual(int(token), 5)
    self.assertEqual(float(testing.read_slot(token)), 2.5)
    self.assertEqual(testing.slot_values()[5], 2.5)

  def test_reset(self):
    testing.write_slot(1, 4.0)
    testing.reset_slots()
    np.testing.assert_array_equal(
      testing.slot_values(), np.zeros(testing.NUM_SLOTS)
    )

  def test_arrays_write_in_index_order(self):
    token = jax.jit(testing.write_slot)(
      jnp.array([3, 4, 3]), jnp.array([1.0, 2.0, 3.0])
    )
    np.testing.assert_array_equal(token, [3, 4, 3])
    np.testing.assert_array_equal(testing.slot_values()[[3, 4]], [3.0, 2.0])

  def test_vmap(self):
    slots = jnp.arange(4, dtype=jnp.int32)
    tokens = jax.vmap(testing.write_slot)(slots, slots * 1.5)
    np.testing.assert_array_equal(
      jax.vmap(testing.read_slot)(tokens), slots * 1.5
    )

  def test_write_survives_unused_result(self):
    @jax.jit
    def write_and_forget(slot):
      testing.write_slot(slot, 9.0)
      return slot

    write_and_forget(jnp.int32(2))
    self.assertEqual(testing.slot_values()[2], 9.0)

  @parameterized.parameters(-1, testing.NUM_SLOTS, 2**31 - 1)
  def test_out_of_range_slot_is_an_error_and_writes_nothing(self, slot):
    with self.assertRaisesRegex(Exception, "outside"):
      jax.block_until_ready(
        testing.write_slot(jnp.array([0, slot]), jnp.array([7.0, 7.0]))
      )
    with self.assertRaisesRegex(Exception, "outside"):
      jax.block_until_ready(testing.read_slot(slot))
    np.testing.assert_array_equal(
      testing.slot_values(), np.zeros(testing.NUM_SLOTS)
    )

  def test_shape_mismatch_is_a_value_error(self):
    with self.assertRaisesRegex(ValueError, "slot shape"):
      testing.write_slot(jnp.zeros(2, jnp.int32), jnp.zeros(3))


if __name__ == "__main__":
  absltest.main()
