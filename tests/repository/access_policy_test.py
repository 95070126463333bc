"""What a native call touches has one implementation, and every stage
calls it (issue 59).

The one access policy (``entangle_jax._src.access_policy``) is the only
module that asks the declarations which one applies to a target
(``Declarations.for_target``), besides ``_src/targets`` itself, where the
lookup lives; ``Resource`` records are parsed in ``_src/access_marker``
alone. The race check, ``in_program_order`` and the sanitizer each import
the policy. A fourth stage that looked a declaration up itself, or parsed
a record itself, would answer the question again, and these tests fail."""

import ast
import pathlib
import unittest

from absl.testing import absltest

from tests.repository.import_layers_test import (
  PACKAGE,
  ROOT,
  imported_anywhere,
  module_names,
)

POLICY = "entangle_jax._src.access_policy"
MARKER = "entangle_jax._src.access_marker"
TARGETS = "entangle_jax._src.targets"

LOOKUP = "for_target"
"""The declarations lookup (`Declarations.for_target`)."""

POLICY_ONLY = {
  "is_pure_host_callback": "whether a host callback counts (rule 1)",
  "distinct_for": "whether a declaration makes elements distinct objects",
  "safe": "which declared safe pair covers two calls",
}
"""Questions of the policy that only it asks of what it wraps (the
names, the declarations), besides `_src/targets`, where they live."""

RECORD_READS = ("marks", "has_marks", "parse_component")
"""Reading a call's ``Resource`` records: the marker's, which only the
policy (and the marker itself) calls."""

STAGES = {
  "the race check": (
    "entangle_jax.testing._analysis.order_analysis",
    "entangle_jax.testing._order.identity",
    "entangle_jax.testing._order.access",
  ),
  "in_program_order": (
    "entangle_jax._src.program_order.natives",
    "entangle_jax._src.program_order.touches",
  ),
  "the sanitizer": (
    "entangle_jax.testing._sanitize.calls",
    "entangle_jax.testing._sanitize.wrapping",
  ),
}
"""Each stage's adapters: they translate the stage's terms into the
policy's inputs, and import the policy."""


def calls_of(path: pathlib.Path, name: str) -> list[int]:
  """The lines of `path` that call a function or method named `name`."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Call):
      f = node.func
      called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
      if called == name:
        found.append(node.lineno)
  return found


def callers(name: str, allowed) -> dict[str, list[int]]:
  """The package modules outside `allowed` (a predicate on module names)
  that call `name`, with the lines."""
  return {
    module: lines
    for module, path in sorted(module_names().items())
    if not allowed(module) and (lines := calls_of(path, name))
  }


class AccessPolicyTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not PACKAGE.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")

  def test_only_the_policy_looks_a_declaration_up(self):
    found = callers(
      LOOKUP,
      lambda m: m == POLICY or m.startswith(TARGETS),
    )
    self.assertEqual(found, {})
    # The check sees the policy's own lookup (it can fail).
    self.assertTrue(calls_of(module_names()[POLICY], LOOKUP))

  def test_only_the_marker_parses_resource_records(self):
    self.assertEqual(callers("parse_component", lambda m: m == MARKER), {})
    self.assertTrue(calls_of(module_names()[MARKER], "parse_component"))

  def test_only_the_policy_reads_a_calls_records(self):
    for name in RECORD_READS:
      self.assertEqual(callers(name, lambda m: m in (POLICY, MARKER)), {}, name)
    # The check sees the policy's own reading (it can fail).
    self.assertTrue(calls_of(module_names()[POLICY], "marks"))

  def test_only_the_policy_asks_what_counts_and_what_is_distinct(self):
    for name, what in POLICY_ONLY.items():
      found = callers(name, lambda m: m == POLICY or m.startswith(TARGETS))
      self.assertEqual(found, {}, f"{name}: {what}")
    self.assertTrue(calls_of(module_names()[POLICY], "is_pure_host_callback"))

  def test_every_stage_calls_the_policy(self):
    modules = module_names()
    for stage, adapters in STAGES.items():
      for adapter in adapters:
        self.assertIn(adapter, modules, stage)
        self.assertIn(
          POLICY, imported_anywhere(modules[adapter], modules), adapter
        )


if __name__ == "__main__":
  absltest.main()
