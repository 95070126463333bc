"""A report lists each pair in the order the program made the calls, and
its fix keeps that order and names what the later call must consume;
followed literally, the fix leaves no race and the program computes what
it says (issue: reports whose fix makes a wrong program)."""

import dataclasses
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import Resource, testing
from entangle_jax.testing import example_store, read_slot, write_slot
from entangle_jax.testing._analysis.ops import Race
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._findings import causes
from entangle_jax.testing._findings import from_analysis as findings
from entangle_jax.testing._order import access
from tests.hand_written_hlo import hlo_module
from tests.test_util import READ, WRITE, compiled

# A renderer binding's shape: refit (a write that hands the scene back as
# result 0), then render (a read) on the stale handle.
_DECLARATIONS = {
  "targets": {
    "blitz_refit": {"mode": "write", "object": 0, "returns_object": [0]},
    "blitz_render": {"mode": "read", "object": 0},
  }
}


def _renderer(refit: str, render: str, render_operand: str) -> str:
  # XLA scheduled render before refit: the text lists it first.
  return hlo_module(
    "%p = s32[] parameter(0)\n"
    f"%{render} = f32[] custom-call(%{render_operand}), "
    'custom_call_target="blitz_render", custom_call_has_side_effect=true\n'
    f"%{refit} = s32[] custom-call(%p), custom_call_target="
    '"blitz_refit", custom_call_has_side_effect=true\n'
    f"ROOT %t = (f32[], s32[]) tuple(%{render}, %{refit})"
  )


def _races(text: str):
  from entangle_jax._src.targets import table

  declared = table.from_table(_DECLARATIONS, "test")
  return OrderAnalysis(text, declarations=declared).races()


class ProgramOrderTest(absltest.TestCase):
  def test_the_earlier_call_is_listed_first_whatever_the_schedule(self):
    # JAX lowers in program order and XLA numbers instructions as it
    # makes them: refit (.4) came before render (.5).
    (race,) = _races(_renderer("ffi_call.4", "ffi_call.5", "p"))
    self.assertEqual(
      (race.first.target, race.second.target), ("blitz_refit", "blitz_render")
    )
    fix = findings.cause_of(race).fix
    self.assertIn(
      "the later call (`blitz_render`) must run after the earlier one "
      "(`blitz_refit`, listed first)",
      fix,
    )
    self.assertIn(
      "pass as the later call's operand 0 the object the earlier call "
      "hands back (its result 0)",
      fix,
    )
    self.assertNotIn("before the write", fix)

  def test_without_numbers_the_text_order_stands(self):
    # The control: names that say nothing of program order keep the
    # analysis's order, the schedule's.
    (race,) = _races(_renderer("refit", "render", "p"))
    self.assertEqual(race.first.target, "blitz_render")

  def test_the_fix_followed_literally_leaves_no_race(self):
    # render's operand 0 is refit's result 0, as the fix says.
    self.assertEqual(
      _races(_renderer("ffi_call.4", "ffi_call.5", "ffi_call.4")), []
    )


def _stale_read(slot):
  token = write_slot(slot, 1.0)  # refit
  return read_slot(slot), token  # render, on the stale handle


def _fixed_read(slot):
  token = write_slot(slot, 1.0)
  return read_slot(token), token  # the fix: write_slot's result 0


class ArgumentTest(absltest.TestCase):
  def test_the_fix_names_the_python_argument_where_declared(self):
    from entangle_jax._src.targets import table

    declared = {
      "targets": {
        **_DECLARATIONS["targets"],
        "blitz_render": {
          "mode": "read",
          "object": 0,
          "argument": {
            "function": "blitz.render",
            "position": 1,
            "name": "scene",
          },
        },
      }
    }
    text = _renderer("ffi_call.4", "ffi_call.5", "p")
    (race,) = OrderAnalysis(
      text, declarations=table.from_table(declared, "test")
    ).races()
    fix = findings.cause_of(race).fix
    self.assertIn("pass as argument 1 (`scene`) of `blitz.render` the", fix)
    self.assertNotIn("operand", fix)
    # Control: without the key, the fix names the operand.
    (race,) = _races(text)
    fix = findings.cause_of(race).fix
    self.assertIn("the later call's operand 0", fix)
    self.assertNotIn("argument", fix)


class CompiledFixTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    example_store.reset_slots()

  def test_a_write_then_read_is_reported_in_that_order(self):
    (race,) = testing.races(compiled(_stale_read, jnp.int32(3)))
    self.assertEqual((race.first.target, race.second.target), (WRITE, READ))
    self.assertIn(
      f"the later call (`{READ}`) must run after the earlier one "
      f"(`{WRITE}`, listed first), as the program made them: pass as the "
      "later call's operand 0 the object the earlier call hands back (its "
      "result 0)",
      findings.cause_of(race).fix,
    )

  def test_the_fix_reads_what_was_written(self):
    self.assertEqual(testing.races(compiled(_fixed_read, jnp.int32(3))), [])
    value, _ = jax.jit(_fixed_read)(jnp.int32(3))
    np.testing.assert_array_equal(value, 1.0)


def _two_resources(name_a, name_b):
  def step(slot):
    res = Resource(slot, name=name_a)
    res.write(write_slot, 1.0)
    other = Resource(slot, name=name_b)  # The stale handle, wrapped again.
    return other.read(read_slot), res.token

  return step


def _one_resource(slot):
  res = Resource(slot, name="scene")
  res.write(write_slot, 1.0)
  return res.read(read_slot), res.token


class TwoResourcesTest(absltest.TestCase):
  def test_the_same_name_is_still_a_race(self):
    for names in (("scene", "view"), ("scene", "scene")):
      with self.subTest(names=names):
        (race,) = testing.races(compiled(_two_resources(*names), jnp.int32(4)))
        fix = findings.cause_of(race).fix
        self.assertIn("res.token", fix)
        self.assertNotIn("same name, or", fix)

  def test_sharing_one_resource_is_the_fix(self):
    self.assertEqual(testing.races(compiled(_one_resource, jnp.int32(4))), [])
    example_store.reset_slots()
    value, _ = jax.jit(_one_resource)(jnp.int32(4))
    np.testing.assert_array_equal(value, 1.0)


def _undeclared(op, stack):
  """`op` as a call nothing declares, made from `stack` (innermost
  first)."""
  instruction = dataclasses.replace(op.instruction, stack=stack)
  return dataclasses.replace(
    op, instruction=instruction, footprint=None, accesses=access.UNKNOWN
  )


class NotYourBindingTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    (self.race,) = testing.races(compiled(_stale_read, jnp.int32(3)))
    root = tempfile.mkdtemp()
    site = os.path.join(root, "venv", "lib", "python3", "site-packages")
    self.binding = (os.path.join(site, "klujax", "_ops.py"), 40)
    self.user = (os.path.join(root, "test_solve.py"), 12)

  def test_an_installed_bindings_calls_lead_with_the_table(self):
    race = Race(
      _undeclared(self.race.first, (self.binding, self.user)),
      _undeclared(self.race.second, (self.binding, self.user)),
    )
    cause = findings.cause_of(race)
    self.assertEqual(cause.headline, "a call the analysis knows nothing about")
    self.assertEqual(cause.code, "EJ005")
    self.assertEqual(cause.steps[0], causes.TABLE_FIRST)
    self.assertIn("[tool.entangle-jax.targets.", cause.fix)

  def test_control_the_users_own_calls_lead_with_resource(self):
    race = Race(
      _undeclared(self.race.first, (self.user,)),
      _undeclared(self.race.second, (self.user,)),
    )
    cause = findings.cause_of(race)
    self.assertEqual(cause.code, "EJ005")
    self.assertEqual(
      cause.steps, (causes.DECLARE_STEP, causes.ANY_RESOURCE_NOTE)
    )


if __name__ == "__main__":
  absltest.main()
