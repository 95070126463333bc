"""The order oracle's judges on hand-made runs and graphs.

tests/oracle/order_oracle_test.py trusts these judges to refute wrong claims and to
never refute a right one; here each rule is shown both ways on inputs small
enough to check by eye.
"""

import types

from absl.testing import absltest

from tests.oracle import oracle_checks, oracle_programs
from tests.oracle.oracle_checks import Claims, Event

BODY = (0, "body")
CONDITION = (0, "condition")


def program(**sites) -> oracle_programs.Program:
  """Calls ``op<tag>``: ``kind`` or ``(kind, loops...)`` per tag."""
  kinds, where = {}, {}
  for name, site in sites.items():
    kind, *loops = site if isinstance(site, tuple) else (site,)
    tag = int(name.removeprefix("op"))
    kinds[tag] = kind
    where[tag] = oracle_programs.Site(tuple(loops))
  return oracle_programs.Program(0, [], where, kinds)


def ordered(*pairs) -> Claims:
  return Claims({}, set(pairs), set())


def not_racing(*pairs) -> Claims:
  return Claims({}, set(), {frozenset(p) for p in pairs})


class _SplitAnalysis:
  """An analysis whose two ways of asking about order disagree on one pair:
  ``precedes`` orders nothing, ``happens_before`` orders op0 before op1."""

  def __init__(self, agree: bool):
    self.agree = agree

  def select_ops(self, selector):
    return [types.SimpleNamespace(name=selector)]

  def precedes(self, a, b):
    return self.agree and (a.name, b.name) == ("op0", "op1")

  def happens_before(self, before, after):
    return (before, after) == ("op0", "op1")

  def races(self, among):
    return []


class ClaimsTest(absltest.TestCase):
  def test_precedes_and_happens_before_that_disagree_are_reported(self):
    prog = program(op0="write", op1="write")
    split = oracle_checks.claims(_SplitAnalysis(agree=False), prog)
    self.assertEqual(
      split.disagreements,
      ["op0 before op1: happens_before says True, precedes says False"],
    )
    agreeing = oracle_checks.claims(_SplitAnalysis(agree=True), prog)
    self.assertEqual(agreeing.disagreements, [])
    self.assertEqual(agreeing.ordered, {(0, 1)})


class RuntimeJudgeTest(absltest.TestCase):
  def refuted(self, prog, claims, *runs):
    return oracle_checks.runtime_refutations(prog, claims, list(runs))

  def test_an_order_is_refuted_by_overlap_or_reversal(self):
    prog = program(op0="write", op1="read")
    first, second = Event(0, 0, 1, 2), Event(1, 0, 3, 4)
    self.assertEmpty(self.refuted(prog, ordered((0, 1)), [first, second]))
    overlapping = Event(1, 0, 0, 3)
    self.assertLen(self.refuted(prog, ordered((0, 1)), [first, overlapping]), 1)
    self.assertLen(self.refuted(prog, ordered((1, 0)), [first, second]), 1)
    # One bad run of many is enough.
    runs = [[first, second]] * 5 + [[first, overlapping]]
    self.assertLen(self.refuted(prog, ordered((0, 1)), *runs), 1)

  def test_calls_of_one_loop_body_are_compared_per_iteration(self):
    prog = program(op0=("write", BODY), op1=("read", BODY))
    # Iteration 1's op0 runs after iteration 0's op1: no contradiction.
    run = [Event(0, 0, 1, 2), Event(1, 0, 3, 4), Event(0, 1, 5, 6)]
    self.assertEmpty(self.refuted(prog, ordered((0, 1)), run))
    late = [*run, Event(1, 1, 0, 1)]  # iteration 1's op1 came first
    self.assertLen(self.refuted(prog, ordered((0, 1)), late), 1)

  def test_a_call_after_a_loop_is_compared_with_every_iteration(self):
    prog = program(op0=("write", BODY), op1="read")
    run = [Event(0, 0, 1, 2), Event(1, 0, 3, 4), Event(0, 1, 5, 6)]
    self.assertLen(self.refuted(prog, ordered((0, 1)), run), 1)

  def test_a_loop_condition_and_its_body_are_not_judged(self):
    prog = program(op0=("read", CONDITION), op1=("write", BODY))
    run = [Event(0, 0, 1, 2), Event(1, 0, 3, 4), Event(0, 1, 5, 6)]
    self.assertEmpty(self.refuted(prog, ordered((1, 0)), run))
    self.assertIsNone(oracle_checks.shared_loops(prog, 0, 1))

  def test_no_race_between_writes_is_refuted_by_overlap_or_both_orders(self):
    prog = program(op0="write", op1="read")
    a, b = Event(0, 0, 1, 2), Event(1, 0, 3, 4)
    self.assertEmpty(self.refuted(prog, not_racing((0, 1)), [a, b], [a, b]))
    self.assertLen(
      self.refuted(prog, not_racing((0, 1)), [a, Event(1, 0, 0, 3)]), 1
    )
    b_first = [Event(1, 0, 1, 2), Event(0, 0, 3, 4)]
    self.assertLen(self.refuted(prog, not_racing((0, 1)), [a, b], b_first), 1)
    # Two reads do not conflict: no race between them claims no order; nor
    # does it with a callback, whose resource is the analysis' to decide.
    for other in ("read", "callback"):
      prog = program(op0="read", op1=other)
      self.assertEmpty(self.refuted(prog, not_racing((0, 1)), [a, b], b_first))

  def test_overlapping(self):
    self.assertFalse(
      oracle_checks.overlapping([Event(0, 0, 1, 2), Event(1, 0, 3, 4)])
    )
    self.assertTrue(
      oracle_checks.overlapping([Event(0, 0, 1, 4), Event(1, 0, 2, 3)])
    )

  def test_counters_decode_the_slot_id(self):
    base = oracle_programs.ITERATION_BASE
    self.assertEqual(oracle_programs.counters(2 * base + 1, 2), (2, 1))
    self.assertEqual(oracle_programs.counters(0, 0), ())


MODULE = """\
HloModule m, is_scheduled=true

%body (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  %g = s32[] get-tuple-element(%p), index=0
  %c1 = s32[] custom-call(%g), custom_call_target="t"
  %c2 = s32[] custom-call(%c1), custom_call_target="t"
  ROOT %t = (s32[]) tuple(%c2)
}

%cond (q: (s32[])) -> pred[] {
  %q = (s32[]) parameter(0)
  %h = s32[] get-tuple-element(%q), index=0
  ROOT %c3 = pred[] custom-call(%h), custom_call_target="t"
}

ENTRY %main (x: s32[]) -> (s32[]) {
  %x = s32[] parameter(0)
  %a = s32[] custom-call(%x), custom_call_target="t"
  %b = s32[] custom-call(%x), custom_call_target="t"
  %init = (s32[]) tuple(%a)
  ROOT %w = (s32[]) while(%init), condition=%cond, body=%body
}
"""

LOG = """\
I1130 thunk_executor.cc:169] ThunkExecutor execution graph:
ThunkExecutor: #thunks=2 #source_nodes=1 #sink_nodes=1
 thunk #00000: op_name=c1, kind=custom-call, dependencies=[], source=true, sink=false, priority=1
 thunk #00001: op_name=c2, kind=custom-call, dependencies=[c1], source=false, sink=true, priority=0
I1130 thunk_executor.cc:169] ThunkExecutor execution graph:
ThunkExecutor: #thunks=1 #source_nodes=1 #sink_nodes=1
 thunk #00000: op_name=c3, kind=custom-call, dependencies=[], source=true, sink=true, priority=0
I1130 thunk_executor.cc:169] ThunkExecutor execution graph:
ThunkExecutor: #thunks=3 #source_nodes=2 #sink_nodes=2
 thunk #00000: op_name=a, kind=custom-call, dependencies=[], source=true, sink=false, priority=1
 thunk #00001: op_name=b, kind=custom-call, dependencies=[], source=true, sink=true, priority=0
 thunk #00002: op_name=w, kind=while, dependencies=[a], source=false, sink=true, priority=0
"""


class GraphJudgeTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.graphs = oracle_checks.ExecutionGraphs(MODULE, LOG)

  def test_the_log_is_read_into_one_graph_per_computation(self):
    self.assertEqual(set(self.graphs.graphs), {"body", "cond", "main"})
    self.assertEqual(self.graphs.graphs["main"]["w"], ["a"])

  def test_paths_run_through_the_instructions_that_call_a_computation(self):
    self.assertTrue(self.graphs.orders("c1", "c2"))
    self.assertFalse(self.graphs.orders("c2", "c1"))
    self.assertTrue(self.graphs.orders("a", "c1"))  # a -> while
    self.assertFalse(self.graphs.orders("b", "c1"))
    self.assertFalse(self.graphs.orders("a", "b"))

  def test_a_loop_condition_and_body_are_not_judged(self):
    self.assertIsNone(self.graphs.orders("c3", "c1"))
    self.assertIsNone(self.graphs.orders("c1", "c3"))

  def test_claims_are_refuted_where_the_graph_has_no_path(self):
    prog = program(op0="write", op1="write", op2="read")
    ops = {
      0: [_Named("a")],
      1: [_Named("b")],
      2: [_Named("c1")],
    }
    right = Claims(ops, {(0, 2)}, {frozenset((0, 2))})
    self.assertEmpty(oracle_checks.graph_refutations(prog, right, self.graphs))
    wrong = Claims(ops, {(1, 2)}, {frozenset((0, 1))})
    self.assertLen(oracle_checks.graph_refutations(prog, wrong, self.graphs), 2)

  def test_a_log_without_the_entry_is_refused(self):
    with self.assertRaisesRegex(ValueError, "no execution graph"):
      oracle_checks.ExecutionGraphs(MODULE, LOG.split("I1130")[1])


class _Named:
  """Stands in for an analysis' Op: the judges read only its name."""

  def __init__(self, name: str):
    self.name = name


if __name__ == "__main__":
  absltest.main()
