"""Declarations: the ``[tool.entangle-jax]`` table of the nearest
pyproject.toml, `declare_target` in code, and entry points; each with a
control that the same program without it answers otherwise."""

import os
import pathlib
import re
import sys
import tempfile
import tomllib
import unittest
from typing import Any, cast

from absl.testing import absltest, parameterized

from entangle_jax import testing
from entangle_jax._src.targets import in_code, sources
from entangle_jax._src.targets import table as table_form
from entangle_jax.testing import Declarations
from tests.hand_written_hlo import hlo_module
from tests.temp_project import project
from tools import rule_docs


def calls(*targets: str, side_effect: bool = False) -> str:
  """A module with one call per target, all on parameter 0, unordered."""
  lines = ["%p = s32[] parameter(0)"]
  for k, target in enumerate(targets):
    effect = ", custom_call_has_side_effect=true" if side_effect else ""
    lines.append(
      f'%c{k} = s32[] custom-call(%p), custom_call_target="{target}"{effect}'
    )
  return hlo_module("\n".join(lines))


def in_effect(target: str) -> testing.TargetDeclaration:
  """The declaration of `target` in effect now (there must be one)."""
  found = testing.declarations_in_effect().for_target(target)
  assert found is not None, target
  return found


SOLVER = calls("lsolve_f64", "lsolve_f64_2", "ldot_f64")


class PyprojectTest(absltest.TestCase):
  def test_the_short_form_takes_globs(self):
    self.assertLen(testing.races(SOLVER), 3)  # The control: may write.
    table = '[tool.entangle-jax]\nread_targets = ["lsolve_*", "ldot_*"]\n'
    with project(table):
      self.assertEqual(testing.races(SOLVER), [])
      analysis = testing.OrderAnalysis(SOLVER)
      (solve, *_) = analysis.select_ops("lsolve_f64")
      assert solve.declaration is not None
      self.assertEqual(solve.declaration.mode, "read")
      self.assertIn("pyproject.toml", solve.declaration.source)
    self.assertLen(testing.races(SOLVER), 3)  # Out of the project again.

  def test_the_nearest_table_is_found_from_the_working_directory(self):
    with project("[tool.entangle-jax]\n") as path:
      self.assertEqual(table_form.find_pyproject(), path)
    with tempfile.TemporaryDirectory() as bare:
      here = os.getcwd()
      os.chdir(bare)
      try:
        found = table_form.find_pyproject()
      finally:
        os.chdir(here)
      self.assertTrue(found is None or not str(found).startswith(bare))

  def test_the_full_form(self):
    table = """
    [tool.entangle-jax.targets."tp_*"]
    mode = "write"
    object = 0
    returns_object = [0]
    distinct_elements = true
    devices = "shared"
    """
    with project(table):
      declaration = in_effect("tp_set")
    self.assertEqual(
      (declaration.mode, declaration.object, declaration.returns_object),
      ("write", 0, (0,)),
    )
    self.assertTrue(declaration.distinct_elements)
    self.assertEqual(declaration.devices, "shared")
    self.assertIsNone(
      table_form.from_table({}, "x").for_target("tp_set")
    )  # The control.

  def test_the_argument_that_carries_the_object(self):
    table = {
      "targets": {
        "lsolve_*": {
          "mode": "write",
          "object": 1,
          "argument": {"function": "lsolve.solve", "position": 0, "name": "n"},
        }
      }
    }
    (declared,) = table_form.from_table(table, "pyproject.toml").targets
    self.assertEqual(
      declared.argument, testing.PythonArgument("lsolve.solve", 0, "n")
    )
    self.assertEqual(str(declared.argument), "0 (`n`) of `lsolve.solve`")
    # Code takes the same, as a mapping or the record.
    made = in_code.declare_target(
      "lib_query_arg", object=0, argument={"function": "q", "position": 2}
    )
    in_code.forget("lib_query_arg")
    self.assertEqual(made.argument, testing.PythonArgument("q", 2))
    # Control: without the key, none.
    del table["targets"]["lsolve_*"]["argument"]
    (declared,) = table_form.from_table(table, "pyproject.toml").targets
    self.assertIsNone(declared.argument)

  def test_a_target_that_touches_nothing_shared(self):
    text = calls("tp_create", "tp_create_2", side_effect=True)
    self.assertLen(testing.races(text), 1)
    with project('[tool.entangle-jax.targets."tp_create*"]\nmode = "none"\n'):
      self.assertEqual(testing.races(text), [])

  def test_safe_pairs(self):
    text = calls("tp_log", "tp_get", side_effect=True)
    self.assertLen(testing.races(text), 1)
    table = """
    [[tool.entangle-jax.safe_pairs]]
    first = "tp_get"
    second = "tp_log*"
    reason = "the log has its own lock"
    """
    with project(table):
      self.assertEqual(testing.races(text), [])
      analysis = testing.OrderAnalysis(text)
      a, b = analysis.ops_among()
      self.assertFalse(analysis.conflict(a, b))

  def test_an_edited_table_is_read_again(self):
    with project('[tool.entangle-jax]\nread_targets = ["lsolve_*"]\n') as path:
      self.assertLen(testing.races(SOLVER), 2)  # ldot_f64 may still write.
      path.write_text(
        '[tool.entangle-jax]\nread_targets = ["lsolve_*", "ldot_*"]\n'
      )
      os.utime(path, (1, 2e9))
      self.assertEqual(testing.races(SOLVER), [])


class PrecedenceTest(absltest.TestCase):
  def test_a_targets_own_false_wins_over_the_projects_true(self):
    text = hlo_module(
      "%h = s32[2] parameter(0)\n"
      "%a = s32[1] slice(%h), slice={[0:1]}\n"
      "%b = s32[1] slice(%h), slice={[1:2]}\n"
      '%w = s32[1] custom-call(%a), custom_call_target="tq_set", '
      "custom_call_has_side_effect=true\n"
      '%r = s32[1] custom-call(%b), custom_call_target="tq_get"'
    )
    table = """
    [tool.entangle-jax]
    distinct_elements = true

    [tool.entangle-jax.targets."tq_*"]
    object = 0
    {own}
    """
    with project(table.replace("{own}", "")):
      self.assertEqual(testing.races(text), [])  # The project's true.
    with project(table.replace("{own}", "distinct_elements = false")):
      self.assertLen(testing.races(text), 1)  # The target's own false.

  def test_the_short_form_sets_only_the_mode(self):
    testing.declare_target("tq_peek", mode="write", object=0, devices="shared")
    try:
      with project('[tool.entangle-jax]\nread_targets = ["tq_peek"]\n'):
        declaration = in_effect("tq_peek")
      self.assertEqual(
        (declaration.mode, declaration.object, declaration.devices),
        ("read", 0, "shared"),
      )
      self.assertIn("pyproject.toml (mode); code", declaration.source)
      # Control: in code alone, it writes.
      self.assertEqual(in_effect("tq_peek").mode, "write")
    finally:
      in_code.forget("tq_peek")

  def test_a_librarys_default_yields_to_the_users(self):
    testing.declare_target("tq_lib", mode="read")
    try:
      kept = testing.declare_target(
        "tq_lib", mode="write", object=0, replace=False
      )
      self.assertEqual(kept.mode, "read")
      self.assertEqual(in_effect("tq_lib").mode, "read")
    finally:
      in_code.forget("tq_lib")
    testing.declare_target("tq_lib", mode="write", object=0, replace=False)
    try:  # The control: with nothing declared, the default applies.
      self.assertEqual(in_effect("tq_lib").mode, "write")
    finally:
      in_code.forget("tq_lib")

  def test_read_targets_given_to_an_analysis_take_globs(self):
    analysis = testing.OrderAnalysis(
      SOLVER, read_targets=["lsolve_*", "ldot_*"]
    )
    self.assertEqual(analysis.races(), [])
    self.assertLen(
      testing.OrderAnalysis(SOLVER, read_targets=["lsolve_*"]).races(), 2
    )


class BadTablesTest(parameterized.TestCase):
  @parameterized.parameters(
    (
      "[tool.entangle-jax]\nread_target = []\n",
      r"unknown keys \['read_target'\]",
    ),
    (
      '[tool.entangle-jax]\nread_targets = "x"\n',
      "read_targets must be a list",
    ),
    (
      '[tool.entangle-jax.targets.t]\nmode = "rw"\n',
      r"target 't': mode must be",
    ),
    (
      "[tool.entangle-jax.targets.t]\nobject = -1\n",
      "object must be an operand",
    ),
    (
      "[tool.entangle-jax.targets.t]\nreturns_object = [0]\n",
      "needs an object",
    ),
    ('[tool.entangle-jax.targets.t]\ndevices = "all"\n', "devices must be"),
    (
      "[tool.entangle-jax.targets.t]\nobject = 0\nargument = 0\n",
      "argument must be a table",
    ),
    (
      "[tool.entangle-jax.targets.t]\nobject = 0\n"
      'argument = { function = "f" }\n',
      r"missing \['position'\]",
    ),
    (
      "[tool.entangle-jax.targets.t]\nobject = 0\n"
      'argument = { function = "f", position = -1 }\n',
      "argument.position must be",
    ),
    (
      '[tool.entangle-jax.targets.t]\nargument = { function = "f", '
      "position = 0 }\n",
      "argument needs an object operand",
    ),
    ("[tool.entangle-jax.targets.t]\nobj = 0\n", r"unknown keys \['obj'\]"),
    ('[[tool.entangle-jax.safe_pairs]]\nfirst = "a"\n', "safe_pairs\\[0\\]"),
    ("[tool.entangle-jax\n", "not valid TOML"),
    ("[tool.entangle_jax]\nread_targets = []\n", r"the table is \[tool"),
    (
      '[[tool.entangle-jax.safe_pairs]]\nfirst = "a"\nsecond = "b"\n'
      'reason = ""\n',
      "reason must be a non-empty string",
    ),
  )
  def test_the_error_names_the_file_and_the_key(self, table, message):
    with project(table) as path:
      with self.assertRaisesRegex((ValueError, TypeError), message) as caught:
        testing.races(SOLVER)
      if "TOML" not in message:
        self.assertIn(str(path), str(caught.exception))


class InCodeTest(absltest.TestCase):
  def tearDown(self):
    in_code.forget("lib_query*")
    super().tearDown()

  def test_declare_target_with_a_glob(self):
    text = calls("lib_query", "lib_query_2")
    self.assertLen(testing.races(text), 1)
    declaration = testing.declare_target("lib_query*", mode="read", object=0)
    self.assertEqual(testing.races(text), [])
    self.assertIn("lib_query*", str(declaration))
    # An analysis keeps what was in effect when it was made.
    kept = testing.OrderAnalysis(text)
    in_code.forget("lib_query*")
    self.assertEqual(kept.races(), [])
    self.assertLen(testing.races(text), 1)

  def test_the_project_table_wins_over_code(self):
    testing.declare_target("lib_query*", mode="read")
    text = calls("lib_query", "lib_query_2")
    with project('[tool.entangle-jax.targets."lib_query*"]\nmode = "write"\n'):
      self.assertLen(testing.races(text), 1)
    self.assertEqual(testing.races(text), [])

  def test_bad_arguments_name_themselves(self):
    with self.assertRaisesRegex(ValueError, "mode must be one of"):
      testing.declare_target("x", mode=cast(Any, "rw"))
    with self.assertRaisesRegex(ValueError, "object must be an operand"):
      testing.declare_target("x", object=-2)
    with self.assertRaisesRegex(TypeError, "non-empty str"):
      testing.declare_target("")
    with self.assertRaisesRegex(TypeError, "returns_object must be a list"):
      testing.declare_target("x", object=0, returns_object=cast(Any, 5))
    # Each names the function called and the argument (not "code:", the
    # declaration's source).
    with self.assertRaisesRegex(
      ValueError, r"^declare_target: target 'x': mode must be one of"
    ):
      testing.declare_target("x", mode=cast(Any, "rw"))
    with self.assertRaisesRegex(
      TypeError, r"^declare_target: pattern must be a non-empty str, not 3$"
    ):
      testing.declare_target(cast(Any, 3))
    with self.assertRaisesRegex(TypeError, r"^declare_target: replace must"):
      testing.declare_target("x", replace=cast(Any, "yes"))
    with self.assertRaisesRegex(
      ValueError, r"^declare_target_mode: mode must be"
    ):
      testing.declare_target_mode("x", cast(Any, "rw"))
    with self.assertRaisesRegex(
      TypeError, r"^declare_target_mode: target must be a str"
    ):
      testing.declare_target_mode(cast(Any, 3), "read")
    # A declaration made by hand is checked as one from a table.
    with self.assertRaisesRegex(ValueError, "mode must be one of"):
      testing.TargetDeclaration("x", cast(Any, "READ"))
    with self.assertRaisesRegex(ValueError, "object must be an operand"):
      testing.TargetDeclaration("x", object=cast(Any, "0"))

  def test_declare_target_mode_takes_none(self):
    text = calls("lib_query", "lib_query_2", side_effect=True)
    self.assertLen(testing.races(text), 1)
    testing.declare_target_mode("lib_query*", "none")
    self.assertEqual(testing.races(text), [])

  def test_reports_say_which_declarations_they_applied(self):
    testing.declare_target("lib_query*", mode="write", object=0)
    text = calls("lib_query", "lib_query_2")
    rendered = testing.format_races(testing.races(text))
    self.assertIn("Declarations applied: `lib_query*` (write", rendered)
    in_code.forget("lib_query*")
    rendered = testing.format_races(testing.races(text))
    self.assertNotIn("Declarations applied", rendered)  # The control.


class EntryPointTest(absltest.TestCase):
  def test_a_binding_publishes_its_declarations(self):
    text = calls("pub_read", "pub_read_2")
    self.assertLen(testing.races(text), 1)
    with tempfile.TemporaryDirectory() as site:
      package = pathlib.Path(site) / "pub_binding.py"
      package.write_text('DECLARATIONS = {"read_targets": ["pub_read*"]}\n')
      info = pathlib.Path(site) / "pub_binding-1.0.dist-info"
      info.mkdir()
      (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pub-binding\nVersion: 1.0\n"
      )
      (info / "entry_points.txt").write_text(
        f"[{sources.ENTRY_POINT_GROUP}]\npub = pub_binding:DECLARATIONS\n"
      )
      sys.path.insert(0, site)
      sources._published.cache_clear()
      try:
        self.assertEqual(testing.races(text), [])
        analysis = testing.OrderAnalysis(text)
        (op, _) = analysis.ops_among()
        assert op.declaration is not None
        self.assertIn("entry point pub", op.declaration.source)
      finally:
        sys.path.remove(site)
        sys.modules.pop("pub_binding", None)
        sources._published.cache_clear()
    self.assertLen(testing.races(text), 1)


class DeclarationsObjectTest(absltest.TestCase):
  def test_an_analysis_takes_declarations_explicitly(self):
    reads = Declarations(
      targets=(testing.TargetDeclaration("lsolve_*", "read", source="test"),)
    )
    analysis = testing.OrderAnalysis(SOLVER, declarations=reads)
    self.assertLen(analysis.races(), 2)  # ldot_f64 may write: both solves.
    self.assertIs(analysis.declarations, reads)
    with self.assertRaisesRegex(TypeError, "declarations must be"):
      testing.OrderAnalysis(SOLVER, declarations=cast(Any, {"x": 1}))


class PageTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not rule_docs.PAGE.is_file():
      raise unittest.SkipTest("no docs/ beside tests/")
    self.text = rule_docs.PAGE.read_text()

  def test_the_pages_tables_are_valid_declarations(self):
    blocks = re.findall(r"```toml\n(.*?)```", self.text, re.S)
    self.assertGreaterEqual(len(blocks), 2)
    for block in blocks:
      table = tomllib.loads(block)["tool"]["entangle-jax"]
      declared = table_form.from_table(table, "docs/proving_order.md")
      self.assertTrue(declared.targets or declared.distinct_elements)

  def test_the_page_lists_every_key(self):
    self.assertEqual(
      rule_docs.block_text(self.text, "declarations"),
      table_form.markdown(),
      f"run {rule_docs.COMMAND}",
    )
    keys = re.findall(r"^\| `(\w+)` \|", table_form.markdown(), re.M)
    self.assertEqual(set(keys), table_form.TARGET_KEYS)


if __name__ == "__main__":
  absltest.main()
