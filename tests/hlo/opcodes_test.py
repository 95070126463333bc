"""The opcode sets are written once (`_hlo.opcodes`) and read from there;
each bookkeeping opcode has its own rule in the rule table."""

import ast
import pathlib

from absl.testing import absltest

from entangle_jax.testing._analysis import selectors
from entangle_jax.testing._hlo import opcodes
from entangle_jax.testing._order import rules

TESTING = pathlib.Path(opcodes.__file__).resolve().parent.parent


class OpcodeSetsTest(absltest.TestCase):
  def test_the_selectors_read_the_one_set(self):
    self.assertIs(selectors.EFFECTFUL_OPCODES, opcodes.EFFECTFUL_OPCODES)
    self.assertIs(selectors.BOOKKEEPING, opcodes.BOOKKEEPING)

  def test_no_other_module_writes_them(self):
    names = {"EFFECTFUL_OPCODES", "BOOKKEEPING", "_PASSES_ON"}
    for path in TESTING.rglob("*.py"):
      if path == pathlib.Path(opcodes.__file__).resolve():
        continue
      with self.subTest(path=path.name):
        tree = ast.parse(path.read_text())
        assigned = {
          target.id
          for node in ast.walk(tree)
          if isinstance(node, ast.Assign)
          for target in node.targets
          if isinstance(target, ast.Name)
        }
        self.assertFalse(assigned & names)

  def test_each_bookkeeping_opcode_has_its_own_rule(self):
    for opcode in opcodes.BOOKKEEPING:
      with self.subTest(opcode=opcode):
        self.assertIsNot(rules.rule_for(opcode), rules.DEFAULT_RULE)
        self.assertIn(opcode, rules.rule_for(opcode).opcodes)


if __name__ == "__main__":
  absltest.main()
