"""What an ordering rule of `in_program_order` is handed, and what it may
do with it (issue 69): each rule's input is a narrow protocol, and a rule
hands back what it decides (`rule_inputs.RuleResult`) for the interpreter
to record, never writing the interpreter's attributes itself.

Both are read from the code: the protocols' members (inherited ones
included) against a budget, and the rule modules' syntax trees for an
assignment to an attribute, or a change in place of one of the
interpreter's (``ctx.backward.extend(...)``). Each check has its control:
the same check on a made-up protocol over budget, or on source that
writes the interpreter's books, fails. And the bits that stand for calls
are counted per evaluation, not across the process (a later trace's sets
of calls are as narrow as the first's).
"""

import ast
import inspect
import pathlib
import typing

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax._src.program_order import (
  call_log,
  interpreter,
  rule_inputs,
  value_table,
)
from entangle_jax._src.program_order import rules as rules_package
from entangle_jax._src.targets import sources

BUDGET = 8
"""The most members a rule's input protocol may have: what a rule reads
stays small enough to say in a line, as JAX hands a DCE rule only the
equation and the outputs used (``pe.dce_rules``)."""

_MUTATORS = frozenset(
  {
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "update",
    "add",
    "discard",
    "setdefault",
    "__setitem__",
  }
)
"""Methods that change a list, dict or set in place."""


def protocol_members(protocol: type) -> set[str]:
  """The public members of `protocol`, those of the protocols it extends
  included: its methods, properties and annotated attributes."""
  names: set[str] = set()
  for klass in protocol.__mro__:
    if klass in (typing.Protocol, typing.Generic, object):
      continue
    names.update(vars(klass))
    names.update(getattr(klass, "__annotations__", {}))
  return {n for n in names if not n.startswith("_")}


def rule_protocols() -> dict[str, type]:
  """The protocols of `rule_inputs`, by name."""
  return {
    name: value
    for name, value in vars(rule_inputs).items()
    if inspect.isclass(value)
    and getattr(value, "_is_protocol", False)
    and value.__module__ == rule_inputs.__name__
  }


def interpreter_attributes() -> set[str]:
  """The attributes `interpreter.Context` and the tables it keeps (its
  values', `value_table.ValueTable`, and its calls', `call_log.CallLog`)
  set on themselves (``self.x = `` anywhere in their classes): the books
  it keeps."""
  found = set()
  for klass in (interpreter.Context, value_table.ValueTable, call_log.CallLog):
    found |= _self_attributes(klass)
  return found


def _self_attributes(klass: type) -> set[str]:
  """The attributes `klass` sets on itself (``self.x = ``)."""
  tree = ast.parse(inspect.getsource(klass))
  found = set()
  for node in ast.walk(tree):
    targets = []
    if isinstance(node, ast.Assign):
      targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
      targets = [node.target]
    for target in targets:
      if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
      ):
        found.add(target.attr)
  return found


def book_writes(source: str, books: set[str]) -> list[str]:
  """Where `source` assigns to an attribute (``inner.chain = c``,
  ``ctx.x += 1``), or changes one of `books` in place
  (``ctx.backward.extend(parts)``, ``ctx.deps[k] = v``): ``line: text``
  each."""
  tree = ast.parse(source)
  found = []

  def is_book(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in books

  for node in ast.walk(tree):
    bad = False
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        for part in ast.walk(target):
          if isinstance(part, ast.Attribute):
            bad = True
          if isinstance(part, ast.Subscript) and is_book(part.value):
            bad = True
    elif isinstance(node, ast.Call):
      func = node.func
      bad = (
        isinstance(func, ast.Attribute)
        and func.attr in _MUTATORS
        and is_book(func.value)
      )
    elif isinstance(node, ast.Delete):
      bad = any(isinstance(t, ast.Attribute) for t in node.targets)
    if bad and isinstance(node, ast.stmt | ast.expr):
      found.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
  return found


def rule_sources() -> dict[str, str]:
  """Each module of `rules` (the registry included), by file name."""
  # By the package's file: an editable install's `__path__` names its
  # loader, not the folder.
  root = pathlib.Path(rules_package.__file__).parent
  return {path.name: path.read_text() for path in sorted(root.glob("*.py"))}


class RuleInputsTest(absltest.TestCase):
  def test_each_rule_protocol_is_within_budget(self):
    protocols = rule_protocols()
    self.assertIn("Loop", protocols)
    over = {
      name: sorted(protocol_members(p))
      for name, p in protocols.items()
      if len(protocol_members(p)) > BUDGET
    }
    self.assertEqual(over, {}, f"over {BUDGET} members")

  def test_the_budget_check_sees_inherited_members(self):
    """Control: a protocol whose members are mostly inherited is counted
    whole, and one over budget is over."""

    class Base(typing.Protocol):
      def a(self) -> None: ...

      def b(self) -> None: ...

    class Wide(Base, typing.Protocol):
      c: int
      d: int
      e: int
      f: int
      g: int
      h: int
      i: int

    self.assertLen(protocol_members(Wide), BUDGET + 1)

  def test_no_rule_writes_the_interpreters_books(self):
    books = interpreter_attributes()
    for name in ("chain", "backward", "own", "accesses", "saving", "deps"):
      self.assertIn(name, books)
    sources = rule_sources()
    self.assertIn("loops.py", sources)
    writes = {
      name: found
      for name, source in sources.items()
      if (found := book_writes(source, books))
    }
    self.assertEqual(writes, {})

  def test_the_write_check_sees_each_kind_of_write(self):
    """Control: what the rules wrote before issue 69 is each found."""
    books = interpreter_attributes()
    for line in (
      "inner.chain = chain",
      "inner.saving = not recompute",
      "inner.native_log = []",
      "ctx.backward.extend(parts)",
      "ctx.own.append(call)",
      "ctx.deps[1] = 2",
      "ctx.prev_bit += 1",
    ):
      self.assertLen(
        book_writes(f"def rule(ctx, inner):\n  {line}\n", books), 1
      )
    # A rule's own local list is no book.
    self.assertEqual(
      book_writes("def rule(ctx):\n  found = []\n  found.append(1)\n", books),
      [],
    )


def call_bits(ctx: interpreter.Context, times: int = 1) -> list[int]:
  """The bits of the native calls `ctx` makes evaluating, `times` over in
  it, a program of three writes to the example store."""

  def program(x):
    for slot in range(3):
      testing.write_slot(slot, 1.0)
    return x

  closed = jax.make_jaxpr(program)(jnp.float32(0))

  def evaluate(x):
    for _ in range(times):
      ctx.run(closed.jaxpr, closed.consts, [x])
    return x

  jax.make_jaxpr(evaluate)(jnp.float32(0))
  return [a.bit for a in ctx.own]


class BitsTest(absltest.TestCase):
  def test_each_trace_counts_its_calls_bits_from_the_first(self):
    """A set of calls is an int as wide as one evaluation's calls: the
    bits are counted per evaluation (and shared by its children), not
    across the process, so a later trace's calls take the same bits."""
    first = call_bits(interpreter.Context(sources.current()))
    again = call_bits(interpreter.Context(sources.current()))
    self.assertLen(first, 3)
    self.assertEqual(again, first)
    self.assertEqual(sorted(first), [1 << k for k in range(3)])

  def test_the_bits_grow_within_one_evaluation(self):
    """Control: the measurement sees a counter that goes on (as a
    process-wide one would across traces): one evaluation running the
    program twice gives its second calls new bits."""
    bits = call_bits(interpreter.Context(sources.current()), times=2)
    self.assertLen(set(bits), 6)
    self.assertGreater(min(bits[3:]), max(bits[:3]))


if __name__ == "__main__":
  absltest.main()
