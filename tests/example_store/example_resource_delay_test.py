"""The example resource's ``delay_us``: calls that take time, so that
calls XLA leaves unordered overlap (what the order oracle relies on)."""

import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import entangle, testing
from entangle_jax.testing import example_store
from tests import test_util  # sets up 8 CPU devices

WIDE = 12
"""Independent calls in `writes`: more than XLA:CPU's 8 ready at once, so
its executor hands some to another thread."""
ATTEMPTS = 200
"""Runs of the unordered program until two calls overlap. Usually the first
does; on 2 busy cores the full suite once saw none in 50. It stops at the
first overlap, so more attempts cost time only when something is wrong."""


def writes(chained: bool):
  """`WIDE` delayed writes, each after the previous one when `chained`."""

  def program(big):
    tokens = [testing.write_slot(np.zeros(200, np.int32), big)]  # > 512 bytes
    for k in range(WIDE):
      slot = jnp.asarray(np.array([k, k], np.int32))
      if chained:
        slot = entangle(slot, tokens[-1])
      tokens.append(testing.write_slot(slot, jnp.ones(2), delay_us=2000))
    return tokens

  return jax.jit(program).lower(jnp.zeros(200)).compile()


def overlapped(compiled) -> bool:
  testing.reset_slots()
  jax.block_until_ready(compiled(jnp.zeros(200)))
  log = sorted(testing.call_log())
  return any(a.end > b.start for a, b in itertools.pairwise(log))


class DelayTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    testing.reset_slots()

  def test_a_delayed_call_takes_at_least_its_delay(self):
    for delay_us in (0, 50_000):
      call = jax.jit(
        lambda s, d=delay_us: testing.read_slot(
          testing.write_slot(s, 2.0, delay_us=d), delay_us=d
        )
      )
      jax.block_until_ready(call(jnp.int32(3)))  # compiled
      start = time.perf_counter()
      self.assertEqual(float(call(jnp.int32(3))), 2.0)
      self.assertGreaterEqual(time.perf_counter() - start, 2 * delay_us / 1e6)

  def test_unordered_delayed_calls_overlap_and_ordered_ones_never(self):
    unordered = writes(chained=False)
    self.assertTrue(
      any(overlapped(unordered) for _ in range(ATTEMPTS)),
      f"no two unordered calls overlapped in {ATTEMPTS} runs",
    )
    chained = writes(chained=True)
    for _ in range(10):
      self.assertFalse(overlapped(chained))

  def test_delay_under_vmap(self):
    write = jax.vmap(lambda s, v: testing.write_slot(s, v, delay_us=1000))
    write(jnp.array([1, 2]), jnp.array([5.0, 6.0]))
    np.testing.assert_array_equal(testing.slot_values()[1:3], [5.0, 6.0])

  @parameterized.parameters(1.5, True, "10", None, np.float32(3.0))
  def test_a_delay_that_is_not_an_int_is_a_type_error(self, delay_us):
    with self.assertRaisesRegex(TypeError, "delay_us must be an int"):
      testing.write_slot(1, 1.0, delay_us=delay_us)
    with self.assertRaisesRegex(TypeError, "read_slot: delay_us"):
      testing.read_slot(1, delay_us=delay_us)

  def test_a_traced_delay_is_a_type_error(self):
    with self.assertRaisesRegex(TypeError, "known when tracing"):
      jax.jit(lambda d: testing.write_slot(1, 1.0, delay_us=d))(5)

  @parameterized.parameters(-1, example_store.MAX_DELAY_US + 1)
  def test_a_delay_out_of_range_is_a_value_error(self, delay_us):
    with self.assertRaisesRegex(ValueError, f"delay_us={delay_us} is outside"):
      testing.write_slot(1, 1.0, delay_us=delay_us)
    self.assertEqual(testing.call_log(), [])

  def test_numpy_integers_are_accepted(self):
    testing.write_slot(4, 3.0, delay_us=np.int16(10))
    self.assertEqual(testing.slot_values()[4], 3.0)

  def direct_write(self, **attributes):
    """A write through the FFI target itself, past the Python checks."""
    call = jax.ffi.ffi_call(
      example_store.WRITE_SLOT_TARGET,
      jax.ShapeDtypeStruct((), jnp.int32),
      has_side_effect=True,
    )
    return jax.block_until_ready(
      call(jnp.int32(2), jnp.float32(1.0), **attributes)
    )

  @parameterized.parameters(
    ({"delay_us": np.int64(-1)}, "delay_us -1 is negative"),
    ({"delay_us": np.float32(1.0)}, "delay_us"),
    ({"delay": np.int64(5)}, "the only attribute a call takes is delay_us"),
  )
  def test_the_handler_refuses_bad_attributes_and_writes_nothing(
    self, attributes, message
  ):
    with self.assertRaisesRegex(Exception, message):
      self.direct_write(**attributes)
    self.assertEqual(testing.call_log(), [])
    self.assertEqual(testing.slot_values()[2], 0.0)

  def test_a_call_without_the_attribute_waits_for_nothing(self):
    self.direct_write()
    self.assertEqual(testing.slot_values()[2], 1.0)
    # No attribute in the module when there is no delay.
    text = test_util.hlo_text(lambda s: testing.write_slot(s, 1.0), 3)
    self.assertNotIn("delay_us", text)
    text = test_util.hlo_text(
      lambda s: testing.write_slot(s, 1.0, delay_us=7), 3
    )
    self.assertIn("delay_us = 7", text)


if __name__ == "__main__":
  absltest.main()
