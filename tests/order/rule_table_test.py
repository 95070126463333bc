"""The rule table: each rule, by number, concluded on a hand-written module
and not concluded on a control that lacks what the rule needs; the table's
own consistency; and the rules' text in docs/proving_order.md."""

import dataclasses
import unittest
from collections.abc import Callable
from unittest import mock

from absl.testing import absltest, parameterized

from entangle_jax import testing
from entangle_jax.testing import Declarations, TargetDeclaration
from entangle_jax.testing._order import rules
from entangle_jax.testing._order.rules import (
  Callees,
  DeviceValue,
  Forwards,
  Identity,
  Parameters,
  Reads,
)
from tests.hand_written_hlo import (
  ASYNC_HLO,
  BRANCH_READS,
  BRANCHES,
  CARRIED,
  COND_BODY,
  LOOP_HLO,
  PREDICATE,
  hlo_module,
  native,
)
from tools import rule_docs


def before(first: str, second: str, **options) -> Callable[[str], bool]:
  return lambda text: testing.happens_before(text, first, second, **options)


def not_before(first: str, second: str, **options) -> Callable[[str], bool]:
  return lambda text: not testing.happens_before(text, first, second, **options)


def no_races(text: str) -> bool:
  return not testing.races(text)


# Identity (rules 18 on): two unordered calls of a declared write, whose
# operand 0 is the object, race unless their objects are proved different.
_W = "tp_set"
_DECLARED = Declarations(
  targets=(TargetDeclaration(_W, "write", 0, (0,), source="test"),)
)
_DISTINCT = Declarations(
  targets=(TargetDeclaration(_W, "write", 0, (0,), True, source="test"),)
)
"""The same, its array elements declared distinct objects."""


def declared_race(declarations: Declarations) -> Callable[[str], bool]:
  """Whether the two declared writes race, under `declarations`."""
  return lambda text: bool(
    testing.OrderAnalysis(text, declarations=declarations).races()
  )


def declared_no_race(declarations: Declarations) -> Callable[[str], bool]:
  race = declared_race(declarations)
  return lambda text: not race(text)


def write(name: str, operand: str) -> str:
  """A declared write of the object that `operand` holds."""
  return (
    f'%{name} = s32[] custom-call(%{operand}), custom_call_target="{_W}", '
    "custom_call_has_side_effect=true"
  )


_HANDLES = "%k1 = s32[] constant(1)\n%k2 = s32[] constant(2)\n"
_PASSED_ON = hlo_module(
  f"{_HANDLES}%c = s32[] copy(%k1)\n%r = s32[1]{{0}} reshape(%c)\n"
  f"{write('one', 'r')}\n{write('two', 'k2')}"
)
_SLICES = hlo_module(
  "%p = s32[2]{0} parameter(0)\n"
  "%s0 = s32[1]{0} slice(%p), slice={[0:1]}\n"
  "%s1 = s32[1]{0} slice(%p), slice={[1:2]}\n"
  f"{write('one', 's0')}\n{write('two', 's1')}"
)
_BROADCAST = "%b = s32[2]{0} broadcast(%h), dimensions={}"
_BROADCAST_SLICES = hlo_module(
  f"%h = s32[] parameter(0)\n{_BROADCAST}\n"
  "%s0 = s32[1]{0} slice(%b), slice={[0:1]}\n"
  "%s1 = s32[1]{0} slice(%b), slice={[1:2]}\n"
  f"{write('one', 's0')}\n{write('two', 's1')}"
)


# Which values differ by device (rules 22 on): one write, declared shared
# by the devices, of a handle in an SPMD module of 8 devices races across
# them unless the handle is built to be another object on each.
_SHARED = Declarations(
  targets=(TargetDeclaration(_W, "write", 0, devices="shared"),)
)
_PARTITIONS = "num_partitions=8"
_REPLICAS = "replica_count=8"


def spmd(entry: str, header: str = _PARTITIONS, **computations: str) -> str:
  """A module of 8 devices, split as `header` says."""
  return hlo_module(entry, **computations).replace(
    "HloModule rules, is_scheduled=true",
    f"HloModule rules, is_scheduled=true, {header}",
  )


def per_device(text: str) -> bool:
  """Whether the shared write's handle is another object on each device."""
  return not testing.OrderAnalysis(text, declarations=_SHARED).races()


_DEVICE_HANDLE = (
  "%h = s32[] parameter(0)\n%id = u32[] partition-id()\n"
  "%c = s32[] convert(%id)\n%s = s32[] add(%h, %c)\n" + write("one", "s")
)
"""The handle ``h + partition-id``."""
_PICKED = (
  "%h = s32[] parameter(0)\n%id = u32[] partition-id()\n"
  "%c = s32[] convert(%id)\n%i = s32[8]{0} iota(), iota_dimension=0\n"
  "%d = s32[1]{0} dynamic-slice(%i, %c), dynamic_slice_sizes={1}\n"
  "%r = s32[] reshape(%d)\n%s = s32[] add(%h, %r)\n" + write("one", "s")
)
"""The handle ``h + iota(8)[partition-id]``."""
_MASKED = (
  "%h = s32[] parameter(0)\n%id = u32[] partition-id()\n"
  "%m = u32[] constant(7)\n%k = u32[] and(%id, %m)\n"
  "%c = s32[] convert(%k)\n%s = s32[] add(%h, %c)\n" + write("one", "s")
)
"""The handle ``h + (partition-id & 7)``, JAX's ``axis_index``."""
_ALIKE = (
  "%h = s32[] parameter(0)\n%z = s32[] constant(0)\n"
  "%g = s32[] maximum(%h, %z)\n%id = u32[] partition-id()\n"
  "%c = s32[] convert(%id)\n%s = s32[] add(%g, %c)\n" + write("one", "s")
)
"""The handle ``max(h, 0) + partition-id``."""


@dataclasses.dataclass(frozen=True)
class RuleCase:
  """`holds` is what the rule concludes: true of `positive`, false of
  `control`, which differs only in what the rule needs."""

  positive: str
  control: str
  holds: Callable[[str], bool]


_PAIR = "(s32[], s32[])"
_TUPLE = f"%t = {_PAIR} tuple(%a, %k)"

CASES: dict[int, RuleCase] = {
  # An operand is an edge; a control predecessor is not.
  1: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n{native('b', 'a')}"
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      + native("b", "p", extra=", control-predecessors={%a}")
    ),
    before("a", "b"),
  ),
  # A zero-size value orders nothing.
  2: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p', shape='s32[0]')}\n"
      + native("b", "a")
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n{native('b', 'a')}"
    ),
    not_before("a", "b"),
  ),
  # An op that uses an async pair's start alone is not after its work.
  3: RuleCase(
    ASYNC_HLO,
    ASYNC_HLO.replace(
      'custom-call(%start), custom_call_target="early"',
      'custom-call(%done), custom_call_target="early"',
    ),
    not_before("read", "early"),
  ),
  # A computation called from two sites, one on each side of "mid", is
  # ordered with it at neither.
  4: RuleCase(
    hlo_module(
      "%p = s32[] parameter(0)\n%c1 = s32[] call(%p), to_apply=%shared\n"
      f"{native('mid', 'c1')}\n%c2 = s32[] call(%mid), to_apply=%shared",
      shared=f"%s = s32[] parameter(0)\n{native('inner', 's')}",
    ),
    hlo_module(
      "%p = s32[] parameter(0)\n%c1 = s32[] call(%p), to_apply=%shared\n"
      f"{native('mid', 'c1')}",
      shared=f"%s = s32[] parameter(0)\n{native('inner', 's')}",
    ),
    not_before("inner", "mid"),
  ),
  # A computation the entry never calls never runs: its call races nothing.
  5: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}",
      unused=f"%s = s32[] parameter(0)\n{native('b', 's')}",
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      "%c = s32[] call(%p), to_apply=%used",
      used=f"%s = s32[] parameter(0)\n{native('b', 's')}",
    ),
    no_races,
  ),
  # An opcode no rule names reads every element of its operand.
  6: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"%t = {_PAIR} tuple(%a, %k)\n%o = {_PAIR} opt-barrier(%t)\n"
      f"%g = s32[] get-tuple-element(%o), index=1\n{native('b', 'g')}"
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"%t = {_PAIR} tuple(%a, %k)\n"
      f"%g = s32[] get-tuple-element(%t), index=1\n{native('b', 'g')}"
    ),
    before("a", "b"),
  ),
  # A custom call reads its aliased operand too.
  7: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      '%m = s32[] custom-call(%p, %a), custom_call_target="m", '
      "output_to_operand_aliasing={{}: (0, {})}\n" + native("b", "m")
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      '%m = s32[] custom-call(%p), custom_call_target="m", '
      "output_to_operand_aliasing={{}: (0, {})}\n" + native("b", "m")
    ),
    before("a", "b"),
  ),
  # A fusion reads an operand its fused computation ignores; a call of the
  # same computation does not (rule 15).
  8: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%f = s32[] fusion(%a, %k), kind=kLoop, calls=%second\n"
      + native("b", "f"),
      second="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      "ROOT %n = s32[] negate(%y)",
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%f = s32[] call(%a, %k), to_apply=%second\n" + native("b", "f"),
      second="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      "ROOT %n = s32[] negate(%y)",
    ),
    before("a", "b"),
  ),
  # A parameter is the operand the call passed.
  9: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      "%c = s32[] call(%a), to_apply=%callee",
      callee=f"%x = s32[] parameter(0)\n{native('b', 'x')}",
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      "%c = s32[] call(%a), to_apply=%callee",
      callee="%x = s32[] parameter(0)\n%z = s32[] constant(0)\n"
      + native("b", "z"),
    ),
    before("a", "b"),
  ),
  # Element 1 of a tuple is its operand 1, not operand 0.
  10: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"{_TUPLE}\n%g = s32[] get-tuple-element(%t), index=1\n"
      + native("b", "g")
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"{_TUPLE}\n%g = s32[] get-tuple-element(%t), index=0\n"
      + native("b", "g")
    ),
    not_before("a", "b"),
  ),
  # Nested get-tuple-elements reach the one element they name.
  11: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"{_TUPLE}\n%u = ({_PAIR}, s32[]) tuple(%t, %k)\n"
      f"%g = {_PAIR} get-tuple-element(%u), index=0\n"
      f"%h = s32[] get-tuple-element(%g), index=1\n" + native("b", "h")
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      f"{_TUPLE}\n%u = ({_PAIR}, s32[]) tuple(%t, %k)\n"
      f"%g = {_PAIR} get-tuple-element(%u), index=0\n"
      f"%h = s32[] get-tuple-element(%g), index=0\n" + native("b", "h")
    ),
    not_before("a", "b"),
  ),
  # Who reads a bitcast of a parameter reads the parameter.
  12: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      f"%c = s32[] call(%a), to_apply=%callee\n{native('b', 'c')}",
      callee="%x = s32[] parameter(0)\n%v = u32[] bitcast(%x)\n"
      + native("r", "v"),
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n"
      f"%c = s32[] call(%a), to_apply=%callee\n{native('b', 'c')}",
      callee="%x = s32[] parameter(0)\n%v = u32[] bitcast(%x)\n"
      "%z = s32[] constant(0)\n" + native("r", "z"),
    ),
    before("a", "r"),
  ),
  # A loop does not read the state element its body only carries.
  13: RuleCase(
    LOOP_HLO,
    LOOP_HLO.replace(
      '%r = s32[] custom-call(%i), custom_call_target="inside"',
      '%r = s32[] custom-call(%i, %c), custom_call_target="inside"',
    ),
    not_before("carried", "inside"),
  ),
  # Calls in two branches of one conditional never race.
  14: RuleCase(
    hlo_module(
      "%p = s32[] parameter(0)\n%k = s32[] parameter(1)\n"
      "%c = s32[] conditional(%k, %p, %p), branch_computations={%l, %r}",
      l=f"%x = s32[] parameter(0)\n{native('left', 'x')}",
      r=f"%y = s32[] parameter(0)\n{native('right', 'y')}",
    ),
    hlo_module(
      "%p = s32[] parameter(0)\n%k = s32[] parameter(1)\n"
      "%c0 = s32[] call(%p), to_apply=%l\n%c1 = s32[] call(%p), to_apply=%r",
      l=f"%x = s32[] parameter(0)\n{native('left', 'x')}",
      r=f"%y = s32[] parameter(0)\n{native('right', 'y')}",
    ),
    no_races,
  ),
  # A call reads of operand 0 only what its computation reads.
  15: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%c = s32[] call(%a, %k), to_apply=%callee",
      callee="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      + native("b", "y"),
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%c = s32[] call(%a, %k), to_apply=%callee",
      callee="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      + native("b", "x"),
    ),
    not_before("a", "b"),
  ),
  # An async-start reads of operand 0 only what its computation reads.
  16: RuleCase(
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%s = ((s32[], s32[]), s32[], u32[]) async-start(%a, %k), "
      "calls=%callee\n%d = s32[] async-done(%s)",
      callee="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      + native("b", "y"),
    ),
    hlo_module(
      f"%p = s32[] parameter(0)\n{native('a', 'p')}\n%k = s32[] constant(1)\n"
      "%s = ((s32[], s32[]), s32[], u32[]) async-start(%a, %k), "
      "calls=%callee\n%d = s32[] async-done(%s)",
      callee="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
      + native("b", "x"),
    ),
    not_before("a", "b"),
  ),
  # An op that uses an all-reduce's start alone is not after the pair.
  17: RuleCase(
    ASYNC_HLO,
    ASYNC_HLO.replace(
      'custom-call(%ar-start), custom_call_target="mid"',
      'custom-call(%ar-done), custom_call_target="mid"',
    ),
    lambda text: _pair_not_before_mid(text),
  ),
  # A copy (and a reshape) of constant 1 is handle 1, not handle 2; a
  # negation of it is a value that may be either.
  18: RuleCase(
    _PASSED_ON,
    _PASSED_ON.replace("copy(%k1)", "negate(%k1)"),
    declared_no_race(_DECLARED),
  ),
  # Constants 1 and 2 are two objects; 1 and 1 are one.
  19: RuleCase(
    hlo_module(f"{_HANDLES}{write('one', 'k1')}\n{write('two', 'k2')}"),
    hlo_module(f"{_HANDLES}{write('one', 'k1')}\n{write('two', 'k1')}"),
    declared_no_race(_DECLARED),
  ),
  # Static slices of elements 0 and 1 are two declared-distinct objects;
  # two slices of element 0 are one.
  20: RuleCase(
    _SLICES,
    _SLICES.replace("slice={[1:2]}", "slice={[0:1]}"),
    declared_no_race(_DISTINCT),
  ),
  # Elements 0 and 1 of a broadcast of one handle are that handle, whatever
  # distinct_elements says; of an array parameter, two distinct objects.
  21: RuleCase(
    _BROADCAST_SLICES,
    _BROADCAST_SLICES.replace(_BROADCAST, "%b = s32[2]{0} parameter(1)"),
    declared_race(_DISTINCT),
  ),
  # partition-id is another number on each partition; not where the
  # devices are replicas, which share partition 0.
  22: RuleCase(
    spmd(_DEVICE_HANDLE),
    spmd(_DEVICE_HANDLE, _REPLICAS),
    per_device,
  ),
  # replica-id is another number on each replica; not where the devices
  # are the partitions of one replica.
  23: RuleCase(
    spmd(_DEVICE_HANDLE.replace("partition-id", "replica-id"), _REPLICAS),
    spmd(_DEVICE_HANDLE.replace("partition-id", "replica-id")),
    per_device,
  ),
  # Element k of an iota, picked by partition-id, differs by device; of a
  # broadcast constant, which holds no numbering, it does not.
  24: RuleCase(
    spmd(_PICKED),
    spmd(
      _PICKED.replace(
        "%i = s32[8]{0} iota(), iota_dimension=0",
        "%z = s32[] constant(0)\n%i = s32[8]{0} broadcast(%z), dimensions={}",
      )
    ),
    per_device,
  ),
  # A widening convert keeps the device numbers; a narrowing one may fold
  # them together.
  25: RuleCase(
    spmd(_DEVICE_HANDLE),
    spmd(
      _DEVICE_HANDLE.replace(
        "%c = s32[] convert(%id)",
        "%n = s8[] convert(%id)\n%c = s32[] convert(%n)",
      )
    ),
    per_device,
  ),
  # h + partition-id differs by device; a rule 6 op in the add's place
  # proves nothing.
  26: RuleCase(
    spmd(_DEVICE_HANDLE.replace("add(%h, %c)", "xor(%h, %c)")),
    spmd(_DEVICE_HANDLE.replace("add(%h, %c)", "remainder(%h, %c)")),
    per_device,
  ),
  # A mask of the low three bits keeps 8 devices apart; of two, it folds
  # them together.
  27: RuleCase(
    spmd(_MASKED),
    spmd(_MASKED.replace("constant(7)", "constant(3)")),
    per_device,
  ),
  # partition-id times a shard's size (2) differs by device; times 0 not.
  28: RuleCase(
    spmd(_MASKED.replace("and(%id, %m)", "multiply(%id, %m)")),
    spmd(
      _MASKED.replace("and(%id, %m)", "multiply(%id, %m)").replace(
        "constant(7)", "constant(0)"
      )
    ),
    per_device,
  ),
  # Picking from an iota of a slot per device differs by device; from one
  # of 4 slots, devices may pick alike.
  29: RuleCase(
    spmd(_PICKED),
    spmd(_PICKED.replace("s32[8]{0} iota()", "s32[4]{0} iota()")),
    per_device,
  ),
  # The maximum of two values alike everywhere is alike everywhere, so
  # offsetting the device's number by it keeps them apart; a rule 6 op in
  # its place proves nothing.
  30: RuleCase(
    spmd(_ALIKE),
    spmd(_ALIKE.replace("maximum(%h, %z)", "remainder(%h, %z)")),
    per_device,
  ),
}


def _pair_not_before_mid(text: str) -> bool:
  analysis = testing.OrderAnalysis(text, all_ops=True)
  (pair,) = [op for op in analysis.effectful_ops() if op.name == "ar-start"]
  (mid,) = analysis.select_ops("mid")
  return not analysis.precedes(pair, mid)


class RuleCasesTest(parameterized.TestCase):
  def test_every_rule_has_a_case(self):
    self.assertEqual(sorted(CASES), [rule.number for rule in rules.all_rules()])

  @parameterized.named_parameters(
    (f"rule_{number}", number) for number in sorted(CASES)
  )
  def test_rule_holds_and_its_control_does_not(self, number):
    case = CASES[number]
    self.assertTrue(case.holds(case.positive), f"rule {number}: positive")
    self.assertFalse(case.holds(case.control), f"rule {number}: control")


def happens_before(text: str, before: str, after: str) -> bool:
  return testing.happens_before(text, before, after)


class Rule13LoopTest(absltest.TestCase):
  """Rule 13 beyond its case: the predicate, sequencing, carried elements."""

  def test_rule_13_a_bare_predicate_element_is_a_use_of_its_producer(self):
    self.assertTrue(happens_before(PREDICATE.replace("{init}", "r"), "R", "W"))
    # Control: the predicate starts from the parameter; the loop then reads
    # nothing R produced.
    self.assertFalse(happens_before(PREDICATE.replace("{init}", "q"), "R", "W"))

  def test_rule_13_a_loops_condition_and_body_are_sequenced(self):
    analysis = testing.OrderAnalysis(COND_BODY.replace("{extra}", ""))
    self.assertEqual(analysis.races(), [])
    (q,), (w,) = analysis.select_ops("Q"), analysis.select_ops("W")
    self.assertTrue(analysis.sequenced(q, w))
    self.assertFalse(analysis.precedes(q, w) or analysis.precedes(w, q))
    self.assertFalse(analysis.is_race(q, w))
    # Control: the same query in the body races with the write there.
    extra = '%q2 = f32[] custom-call(%i), custom_call_target="Q2"'
    text = COND_BODY.replace("{extra}", extra)
    self.assertEqual(testing.races(text), [("w", "q2")])

  def test_rule_13_a_carried_element_is_the_initial_values_buffer(self):
    text = CARRIED.replace("{second}", "c")
    self.assertTrue(happens_before(text, "X", "AFTER"))
    self.assertFalse(happens_before(text, "IN", "AFTER"))
    # Control: once the body writes element 1, the reader waits for the loop.
    self.assertTrue(
      happens_before(CARRIED.replace("{second}", "in"), "IN", "AFTER")
    )


class Rule14ConditionalTest(absltest.TestCase):
  """Rule 14 beyond its case: branch reads, and exclusive branches."""

  def test_rule_14_a_conditional_reads_only_what_its_branches_read(self):
    self.assertFalse(
      happens_before(BRANCH_READS.replace("{k}", "1"), "A", "IN")
    )
    # Control: the branch reads A's element.
    self.assertTrue(happens_before(BRANCH_READS.replace("{k}", "0"), "A", "IN"))

  def test_rule_14_ops_in_two_branches_are_exclusive(self):
    analysis = testing.OrderAnalysis(BRANCHES.replace("{extra}", ""))
    self.assertEqual(analysis.races(), [])
    (x,), (y,) = analysis.select_ops("X"), analysis.select_ops("Y")
    self.assertTrue(analysis.exclusive(x, y))
    # Control: two unordered calls in one branch race.
    extra = native("x2", "t").replace('"x2"', '"X2"')
    text = BRANCHES.replace("{extra}", extra)
    self.assertEqual(testing.races(text), [("x", "x2")])


class Rule18PassesOnTest(absltest.TestCase):
  """Rule 18 beyond its case: a reshape passes the handle on by itself."""

  def test_rule_18_a_reshape_passes_the_handle_on(self):
    # The reshape of handle 1's copy is handle 1, not handle 2.
    self.assertFalse(declared_race(_DECLARED)(_PASSED_ON))
    # Control: an op of rule 6 in its place makes a value that may be
    # handle 2.
    other = _PASSED_ON.replace("reshape(%c)", "negate(%c)")
    self.assertTrue(declared_race(_DECLARED)(other))


class IdentityColumnTest(absltest.TestCase):
  """`ObjectFinder` reads a construct's identity from its rule, not from
  its opcode; rules 18 on differ from rule 6 in their identity alone."""

  def test_identity_is_the_rules_column(self):
    self.assertTrue(CASES[18].holds(CASES[18].positive))
    # Control: the same module, copy's rule given rule 6's identity.
    copy = rules.rule_for("copy")
    plain = dataclasses.replace(copy, identity=Identity.NEW_VALUE)
    real = rules.rule_for

    def patched(opcode: str) -> rules.HloRule:
      return plain if opcode == "copy" else real(opcode)

    # (Another module name: parsed modules are cached by their text.)
    text = CASES[18].positive.replace("HloModule rules", "HloModule patched")
    with mock.patch.object(rules, "rule_for", patched):
      self.assertFalse(CASES[18].holds(text))

  def test_rules_18_on_order_as_rule_6(self):
    default = rules.DEFAULT_RULE
    for rule in rules.HLO_RULES:
      if rule.number < 18:
        continue
      with self.subTest(rule=rule.number):
        if rule.number < 22:
          self.assertIsNot(rule.identity, default.identity)
        else:  # Which values differ by device.
          self.assertIs(rule.identity, default.identity)
          self.assertIsNot(rule.device_value, default.device_value)
        self.assertEqual(
          (rule.reads, rule.forwards, rule.parameters, rule.callees),
          (
            default.reads,
            default.forwards,
            default.parameters,
            default.callees,
          ),
        )
        self.assertIs(rule.framing, default.framing)

  def test_every_identity_has_a_rule(self):
    used = {rule.identity for rule in rules.HLO_RULES}
    self.assertEqual(used, set(Identity))


_THROUGH = spmd(
  "%h = s32[] parameter(0)\n%hv = s32[2]{0} broadcast(%h), dimensions={}\n"
  "%hs = s32[1]{0} slice(%hv), slice={[0:1]}\n%hr = s32[] reshape(%hs)\n"
  "%id = u32[] partition-id()\n%b = u32[] bitcast(%id)\n"
  "%cp = u32[] copy(%b)\n%c = s32[] convert(%cp)\n"
  "%f = s32[] call(%hr, %c), to_apply=%offset\n%z = s32[] constant(0)\n"
  "%s = s32[] add(%f, %z)\n" + write("one", "s"),
  offset="%x = s32[] parameter(0)\n%y = s32[] parameter(1)\n"
  "ROOT %a = s32[] add(%x, %y)",
)
"""A device's number passed through every row that passes one on."""
_DEVICE_COLUMN: dict[str, str] = {
  "partition-id": _THROUGH,
  "parameter": _THROUGH,
  "broadcast": _THROUGH,
  "slice": _THROUGH,
  "reshape": _THROUGH,
  "bitcast": _THROUGH,
  "copy": _THROUGH,
  "convert": _THROUGH,
  "call": _THROUGH,
  "add": _THROUGH,
  "fusion": _THROUGH.replace(
    "call(%hr, %c), to_apply=%offset",
    "fusion(%hr, %c), kind=kLoop, calls=%offset",
  ),
  "constant": spmd(_DEVICE_HANDLE.replace("parameter(0)", "constant(5)")),
  "replica-id": CASES[23].positive,
  "iota": CASES[24].positive,
  "dynamic-slice": CASES[24].positive,
  "and": CASES[27].positive,
  "multiply": CASES[28].positive,
  "maximum": CASES[30].positive,
}
"""For an opcode of each row with a device value, a module whose handle
differs by device through it."""


class DeviceColumnTest(parameterized.TestCase):
  """`_DeviceValues` reads a construct's device value from its rule, not
  from its opcode: each row's case, and its control, the same module with
  that row given rule 6's device value."""

  @parameterized.named_parameters(
    (opcode.replace("-", "_"), opcode) for opcode in _DEVICE_COLUMN
  )
  def test_device_value_is_the_rules_column(self, opcode):
    text = _DEVICE_COLUMN[opcode]
    self.assertTrue(per_device(text))
    row = rules.rule_for(opcode)
    plain = dataclasses.replace(row, device_value=DeviceValue.UNKNOWN)
    real = rules.rule_for

    def patched(name: str) -> rules.HloRule:
      return plain if name == opcode else real(name)

    # (Another module name: parsed modules are cached by their text.)
    renamed = text.replace("HloModule rules", "HloModule patched")
    with mock.patch.object(rules, "rule_for", patched):
      self.assertFalse(per_device(renamed))

  def test_every_row_with_a_device_value_has_a_case(self):
    rows = {
      rule.number
      for rule in rules.HLO_RULES
      if rule.device_value is not DeviceValue.UNKNOWN
    }
    covered = {rules.rule_for(opcode).number for opcode in _DEVICE_COLUMN}
    self.assertEqual(covered, rows)

  def test_every_device_value_has_a_rule(self):
    used = {rule.device_value for rule in rules.HLO_RULES}
    self.assertEqual(used, set(DeviceValue))


class RuleTableTest(absltest.TestCase):
  def test_numbers_are_one_to_n(self):
    numbers = [rule.number for rule in rules.all_rules()]
    self.assertEqual(numbers, list(range(1, len(numbers) + 1)))

  def test_each_opcode_has_one_rule(self):
    opcodes = [o for rule in rules.HLO_RULES for o in rule.opcodes]
    self.assertEqual(len(opcodes), len(set(opcodes)))
    for rule in rules.HLO_RULES:
      for opcode in rule.opcodes:
        self.assertIs(rules.rule_for(opcode), rule)

  def test_unknown_opcodes_get_the_default(self):
    self.assertIs(rules.rule_for("some-new-op"), rules.DEFAULT_RULE)
    self.assertIs(rules.rule_for("all-gather-start"), rules.rule_for("send"))
    self.assertIs(rules.rule_for("copy-done"), rules.rule_for("send"))

  def test_what_forwards_through_callees_reads_through_them(self):
    # The dataflow follows a result element into called computations only
    # for instructions whose reads it also follows there.
    for rule in rules.HLO_RULES:
      with self.subTest(rule=rule.number):
        if rule.forwards is Forwards.ROOTS or rule.callees is not (
          Callees.OVERLAP
        ):
          self.assertIs(rule.reads, Reads.CALLEES)
        if rule.reads is Reads.CALLEES:
          self.assertIsNot(rule.parameters, Parameters.NONE)
        else:
          self.assertIs(rule.parameters, Parameters.NONE)


class RulesPageTest(absltest.TestCase):
  def test_the_page_holds_the_table(self):
    if not rule_docs.PAGE.is_file():
      raise unittest.SkipTest("no docs/ beside tests/")
    text = rule_docs.PAGE.read_text()
    start, end = rule_docs.page_rules(text)
    self.assertEqual(
      text[start:end],
      rules.markdown(),
      f"run {rule_docs.COMMAND} to rewrite the page's rules",
    )


if __name__ == "__main__":
  absltest.main()
