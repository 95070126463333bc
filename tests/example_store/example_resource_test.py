"""The example native resource: slots written and read through XLA."""

import importlib
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import testing


def enable_x64():
  """64-bit types on, as a context manager (the API moved in jax 0.7)."""
  if hasattr(jax, "enable_x64"):
    return jax.enable_x64(True)
  legacy: Any = importlib.import_module("jax.experimental")
  return legacy.enable_x64()


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

  @parameterized.parameters(
    -1,
    testing.NUM_SLOTS,
    2**31 - 1,
    2**32 + 3,  # wrapped to slot 3 when narrowed to int32
    np.int64(2**32 + 3),
    np.uint32(4294967295),  # was reported as "slot id -1"
    2**70,
  )
  def test_out_of_range_slot_is_an_error_and_writes_nothing(self, slot):
    expected = rf"slot id {int(slot)} is outside \[0, {testing.NUM_SLOTS}\)"
    with self.assertRaisesRegex(ValueError, expected):
      testing.write_slot(slot, 7.0)
    with self.assertRaisesRegex(ValueError, expected):
      testing.read_slot(slot)
    self.assert_nothing_written()

  @parameterized.parameters(-1, testing.NUM_SLOTS, 2**31 - 1)
  def test_out_of_range_traced_slot_is_a_runtime_error(self, slot):
    write = jax.jit(testing.write_slot)
    with self.assertRaisesRegex(Exception, f"slot id {slot} is outside"):
      jax.block_until_ready(write(jnp.array([0, slot]), jnp.array([7.0, 7.0])))
    with self.assertRaisesRegex(Exception, "outside"):
      jax.block_until_ready(jax.jit(testing.read_slot)(jnp.int32(slot)))
    self.assert_nothing_written()

  @parameterized.parameters(
    (np.int64, 2**32 + 3),  # narrows to slot 3
    (np.uint64, 2**32 + 3),
    (np.uint32, 4294967295),  # narrows to -1
  )
  def test_wide_traced_slot_does_not_wrap(self, dtype, bad):
    with enable_x64():
      slot = np.array([0, bad], dtype)
      write = jax.jit(testing.write_slot)
      with self.assertRaisesRegex(Exception, "wider than int32"):
        jax.block_until_ready(write(slot, np.array([7.0, 7.0], np.float32)))
      # In range, a wide dtype is fine.
      jax.block_until_ready(
        write(np.array([5], dtype), np.array([2.0], np.float32))
      )
    self.assertEqual(testing.slot_values()[5], 2.0)

  @parameterized.parameters(
    -0.5,  # was slot 0
    63.9,  # was slot 63
    np.float32(3.0),
    (np.array([1.0, 2.0], np.float32),),
    True,
    np.bool_(False),
    "3",
  )
  def test_non_integer_slot_is_a_type_error(self, slot):
    if isinstance(slot, np.ndarray):
      slot = jnp.asarray(slot)  # A JAX array; made here, not at import.
    with self.assertRaisesRegex(TypeError, "integer"):
      testing.write_slot(slot, jnp.zeros(jnp.shape(slot)))
    with self.assertRaisesRegex(TypeError, "integer"):
      testing.read_slot(slot)
    if not isinstance(slot, str):
      with self.assertRaisesRegex(TypeError, "integer"):
        jax.jit(testing.read_slot)(slot)
    self.assert_nothing_written()

  def test_integer_dtypes_in_range_work(self):
    for n, dtype in enumerate((np.int8, np.uint8, np.int16, np.int64)):
      testing.write_slot(dtype(n), float(n + 1))
    np.testing.assert_array_equal(testing.slot_values()[:4], [1, 2, 3, 4])

  def assert_nothing_written(self):
    np.testing.assert_array_equal(
      testing.slot_values(), np.zeros(testing.NUM_SLOTS)
    )
    self.assertEqual([r for r in testing.call_log() if r.kind == "write"], [])

  def test_call_log_records_calls_in_the_order_they_ran(self):
    token = testing.write_slot(jnp.array([3, 4]), jnp.array([1.0, 2.0]))
    testing.read_slot(token)
    testing.write_slot(7, 1.0)
    log = testing.call_log()
    self.assertEqual(
      [(r.kind, r.slots) for r in log],
      [("write", (3, 4)), ("read", (3, 4)), ("write", (7,))],
    )
    for record in log:
      self.assertLess(record.start, record.end)
    for earlier, later in itertools.pairwise(log):
      self.assertLess(earlier.end, later.start)

  def test_slot_values_is_a_logged_read_of_every_slot(self):
    testing.write_slot(2, 5.0)
    self.assertEqual(testing.slot_values()[2], 5.0)
    self.assertEqual(
      [(r.kind, r.slots) for r in testing.call_log()],
      [("write", (2,)), ("read", tuple(range(testing.NUM_SLOTS)))],
    )

  def test_call_log_records_only_successful_calls(self):
    with self.assertRaisesRegex(Exception, "outside"):
      jax.block_until_ready(jax.jit(testing.read_slot)(jnp.int32(-1)))
    self.assertEqual(testing.call_log(), [])

  def test_reset_clears_the_call_log(self):
    testing.write_slot(1, 1.0)
    self.assertLen(testing.call_log(), 1)
    testing.reset_slots()
    self.assertEqual(testing.call_log(), [])

  def test_shape_mismatch_is_a_value_error(self):
    with self.assertRaisesRegex(ValueError, "slot shape"):
      testing.write_slot(jnp.zeros(2, jnp.int32), jnp.zeros(3))


if __name__ == "__main__":
  absltest.main()
