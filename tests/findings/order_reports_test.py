"""assert_happens_before and format_races: messages that name each unordered
pair by target, scope and source line, and say the usual fix."""

import os
from typing import Any, cast

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import entangle, testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from tests.test_util import READ, WRITE, compiled, records_full_stack

THIS_FILE = os.path.basename(__file__)


class AssertHappensBeforeTest(absltest.TestCase):
  def test_failure_names_target_scope_line_and_fix(self):
    c = _hazard.compiled(Ordering.NONE)
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(c, "read", "second_write")
    message = str(raised.exception)
    self.assertIn("'read' does not happen before 'second_write'", message)
    # jax < 0.7 adds a jit(main) component.
    self.assertRegex(message, rf"{READ} scope 'jit\(hazard\)/.*read/")
    self.assertRegex(message, rf"{WRITE} scope 'jit\(hazard\)/.*second_write/")
    # Older jax records only the innermost frame: the example resource's.
    if records_full_stack():
      self.assertRegex(message, r"entangle_jax/demo/_hazard\.py:\d+ \(%")
    else:
      where = r"entangle_jax/testing/example_store\.py"
      self.assertRegex(message, rf"{where}:\d+ \(%")
    self.assertIn("entangle(token, r)", message)

  def test_an_op_both_selectors_pick_is_named(self):
    c = _hazard.compiled(Ordering.ENTANGLE)
    with self.assertRaisesRegex(
      AssertionError, r"'second_write' and 'second_write' both pick %\S+: an op"
    ):
      testing.assert_happens_before(c, "second_write", "second_write")
    # Control: a pair of different ops that is not ordered gets no such note.
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(
        _hazard.compiled(Ordering.NONE), "read", "second_write"
      )
    self.assertNotIn("both pick", str(raised.exception))

  def test_passes_when_ordered(self):
    testing.assert_happens_before(
      _hazard.compiled(Ordering.ENTANGLE), "read", "second_write"
    )

  def test_location_is_the_users_line(self):
    def fn(slot):
      t = testing.write_slot(slot, 1.0)
      x = testing.read_slot(t)  # the line the message must point at
      testing.write_slot(t, 2.0)
      return x

    c = compiled(fn, jnp.int32(0))
    (race,) = testing.races(c)
    line = fn.__code__.co_firstlineno + 2
    location = race.first.location
    assert location is not None
    if records_full_stack():
      self.assertGreater(len(race.first.instruction.stack), 1)
      expected = f"{THIS_FILE}:{line}"
    else:  # Older jax records only the innermost frame: the wrapper's.
      self.assertLen(race.first.instruction.stack, 1)
      expected = f"example_store.py:{race.first.instruction.stack[0][1]}"
    self.assertEqual(location.split(os.sep)[-1], expected)
    rendered = testing.format_races(testing.races(c))
    self.assertIn(expected, rendered)
    self.assertIn(
      "1 pair of calls may conflict and run in either order", rendered
    )
    # Both touch the slot the argument names (the store declares its
    # targets' object operand), so this is the same object, unordered.
    self.assertIn("(reads object slot)", rendered)  # The argument's name.
    self.assertIn("(writes object slot)", rendered)
    self.assertIn("the same object, and nothing orders them", rendered)
    self.assertEqual(
      testing.format_races([]),
      "No races: every two calls that may conflict are ordered.",
    )

  def test_format_races_takes_races(self):
    races = testing.races(_hazard.compiled(Ordering.NONE))
    self.assertIn("1 pair of calls may conflict", testing.format_races(races))
    # A Race equals its tuple of names, but the names alone cannot be shown.
    names = [tuple(races[0])]
    self.assertEqual(races, names)
    with self.assertRaisesRegex(TypeError, r"races\[0\] is tuple \('"):
      testing.format_races(cast(Any, names))
    with self.assertRaisesRegex(TypeError, r"races\[0\] is str 'a'"):
      testing.format_races(cast(Any, "ab"))

  def test_zero_size_witness_is_explained(self):
    def fn(slot, empty):
      t = testing.write_slot(slot, 1.0)
      with jax.named_scope("read"):
        x = testing.read_slot(t)
      witness = x[None][:0] if empty else x
      t = entangle(t, witness)  # the line the note must point at
      with jax.named_scope("write"):
        testing.write_slot(t, 2.0)
      return x

    empty = compiled(lambda s: fn(s, empty=True), jnp.int32(0))
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(empty, "read", "write")
    message = str(raised.exception)
    self.assertIn("1 entangle call here only has zero-size witnesses", message)
    (op,) = testing.OrderAnalysis(empty).empty_witness_entangles()
    self.assertEqual(op.target, "entangle_jax_entangle")
    self.assertIn(f"  {op.label()}", message.splitlines())
    if records_full_stack():
      line = fn.__code__.co_firstlineno + 5
      self.assertIn(f"{THIS_FILE}:{line} ", message)
    # Controls: a witness with elements orders, and a failure with no
    # empty witness says nothing about them.
    testing.assert_happens_before(
      compiled(lambda s: fn(s, empty=False), jnp.int32(0)), "read", "write"
    )
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(
        _hazard.compiled(Ordering.NONE), "read", "second_write"
      )
    self.assertNotIn("zero-size", str(raised.exception))


# A while loop fed by a fusion, a side-effecting op ordered only by a control
# predecessor, and one ordered by nothing.


if __name__ == "__main__":
  absltest.main()
