"""The order a report gives a pair in modules where XLA's instruction
numbers are not the program's: pmap (which JAX traces as a shard_map of
its own ``_fun``) and a module deserialized from ``jax.export``. There the
report either names the earlier call first, or says it cannot tell; it
never tells the user to order the earlier call after the later one. And it
suggests no ``in_program_order`` of a function the user does not have."""

import re

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import export_safety_checks, testing
from entangle_jax.testing import example_store, read_slot, write_slot
from tests import test_util


def step(slot):
  t = write_slot(slot, 1.0)
  x = read_slot(t)  # The read comes first,
  write_slot(t, 2.0)  # then the second write.
  return x


def read_and_second_write(compiled) -> list[testing.Race]:
  """The pairs of the module's read with a write made after it, on one
  device (pairs across devices have no program order)."""
  found = []
  for race in testing.races(compiled):
    ops = {race.first.target, race.second.target}
    both = {example_store.READ_SLOT_TARGET, example_store.WRITE_SLOT_TARGET}
    if ops == both and not race.across_devices:  # One device's pair.
      found.append(race)
  return found


def says_which_is_first(report: str) -> bool:
  return "listed first), as the program made them" in report


class TransformedModulesTest(absltest.TestCase):
  def assert_right_or_unknown(self, compiled, read_is_first: bool) -> str:
    pairs = read_and_second_write(compiled)
    self.assertNotEmpty(pairs)
    report = testing.format_races(pairs)
    for race in pairs:
      if race.order_known:
        # Known: the read (made before the second write) is first.
        self.assertEqual(race.first.target, example_store.READ_SLOT_TARGET)
    if not read_is_first:
      self.assertFalse(says_which_is_first(report), report)
      self.assertIn("the module does not say which came first", report)
    self.assertNotIn("in_program_order(_fun)", report)
    self.assertNotIn("in_program_order(call)", report)
    return report

  def test_pmap(self):
    slots = np.arange(2, dtype=np.int32)
    compiled = jax.pmap(step).lower(slots).compile()
    report = self.assert_right_or_unknown(compiled, read_is_first=True)
    if test_util.records_full_stack():
      # The pair is named with the user's lines, whatever the order said.
      self.assertRegex(report, r"transformed_pair_order_test\.py:\d+")

  @absltest.skipUnless(
    test_util.records_full_stack(),
    "older jax writes neither call_exported into the scopes of an exported "
    "module's calls nor their program's lines: nothing tells its renumbered "
    "instructions apart (a known limit)",
  )
  def test_a_deserialized_export(self):
    checks = [
      *export_safety_checks(),
      jax.export.DisabledSafetyCheck.custom_call(
        example_store.READ_SLOT_TARGET
      ),
      jax.export.DisabledSafetyCheck.custom_call(
        example_store.WRITE_SLOT_TARGET
      ),
    ]
    exported = jax.export.export(jax.jit(step), disabled_checks=checks)
    restored = jax.export.deserialize(
      exported(jax.ShapeDtypeStruct((), jnp.int32)).serialize()
    )
    compiled = jax.jit(restored.call).lower(jnp.int32(0)).compile()
    # Numbered anew on deserializing: only the lines say.
    self.assert_right_or_unknown(compiled, read_is_first=True)
    # Control: the same program jitted directly is numbered as JAX lowered
    # it, and the report says the read came first and how to fix it with
    # in_program_order.
    direct = jax.jit(step).lower(jnp.int32(0)).compile()
    (race,) = read_and_second_write(direct)
    self.assertTrue(race.order_known)
    self.assertEqual(race.first.target, example_store.READ_SLOT_TARGET)
    self.assertTrue(says_which_is_first(testing.format_races([race])))
    self.assertTrue(
      re.search(r"in_program_order\(step\)", testing.format_races([race]))
    )


if __name__ == "__main__":
  absltest.main()
