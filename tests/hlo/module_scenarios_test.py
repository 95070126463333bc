"""The rules in combination, on larger hand-written modules: loops around
fusions and calls (rules 4, 8, 13), control predecessors beside real edges
(rule 1), async calls and collectives (rules 3, 16, 17), exclusive branches
and shared computations (rules 4, 14), and what the parser reads. Each rule
alone, with its control, is tests/order/rule_table_test.py's."""

from absl.testing import absltest, parameterized

from entangle_jax import testing
from entangle_jax.testing import _hlo
from tests.hand_written_hlo import (
  ASYNC_HLO,
  BRANCHES_HLO,
  ENTANGLE_HLO,
  EXCLUSIVE_HLO,
  LOOP_HLO,
  NESTED_HLO,
)


class DataflowRulesTest(parameterized.TestCase):
  """Loops, nesting, control predecessors, async pairs, tuples, zero-size
  values."""

  @parameterized.parameters(
    ("used", "inside", True),
    ("carried", "inside", False),  # the loop never reads it
    ("inside", "after_loop", True),
    ("inside", "after_carried", False),  # reads only what the loop carried
    ("carried", "after_carried", True),
    ("used", "after_loop", True),
  )
  def test_loop_carried_elements(self, before, after, expected):
    self.assertEqual(testing.happens_before(LOOP_HLO, before, after), expected)

  @parameterized.parameters(
    ("first", "read", True),
    ("prepare", "read", True),  # fusion -> tuple -> while containing read
    ("prepare", "write", True),
    ("write", "free", False),
    ("read", "write", False),  # unordered within the loop body
    ("write", "read", False),
    ("read", "first", False),
    ("cond", "write", False),  # condition and body of one while
    ("free", "after", False),
    ("first", "free", False),
  )
  def test_nested(self, before, after, expected):
    self.assertEqual(
      testing.happens_before(NESTED_HLO, before, after, all_ops=True), expected
    )

  @parameterized.parameters(("read", "after"), ("write", "after"))
  def test_control_predecessors_do_not_count(self, before, after):
    # %after has only control-predecessors={%loop}: XLA:CPU's thunk executor
    # orders by buffer and resource conflicts, so this orders nothing.
    self.assertFalse(testing.happens_before(NESTED_HLO, before, after))
    # Control: the same edge as an operand counts.
    as_operand = NESTED_HLO.replace(
      'custom-call(%a), custom_call_target="after"',
      'custom-call(%a, %loop), custom_call_target="after"',
    ).replace(", control-predecessors={%loop}", "")
    self.assertTrue(testing.happens_before(as_operand, before, after))

  def test_parsed_control_predecessors(self):
    analysis = testing.OrderAnalysis(NESTED_HLO)
    (after,) = analysis.select_ops("after")
    self.assertEqual(after.instruction.control_predecessors, ("loop",))

  @parameterized.parameters(
    ("before", "read", True),
    ("read", "late", True),  # after the done
    ("read", "early", False),  # after the start only: may overlap the read
    ("early", "read", False),
    ("before", "mid", True),
    ("late", "mid", False),  # all-reduce is effectful, "mid" overlaps it
    ("read", "end", True),
  )
  def test_async_pairs(self, before, after, expected):
    self.assertEqual(testing.happens_before(ASYNC_HLO, before, after), expected)

  def test_async_collective_is_one_op(self):
    analysis = testing.OrderAnalysis(ASYNC_HLO)
    (reduce,) = [op for op in analysis.effectful_ops() if op.target is None]
    self.assertEqual((reduce.name, reduce.last), ("ar-start", "ar-done"))
    self.assertTrue(analysis.precedes(analysis.select_ops("read")[0], reduce))
    self.assertFalse(analysis.precedes(analysis.select_ops("late")[0], reduce))
    self.assertTrue(analysis.precedes(reduce, analysis.select_ops("end")[0]))
    self.assertFalse(analysis.precedes(reduce, analysis.select_ops("mid")[0]))

  def test_entangles_with_only_zero_size_witnesses(self):
    analysis = testing.OrderAnalysis(ENTANGLE_HLO)
    entangles = analysis.empty_witness_entangles()
    self.assertEqual([op.name for op in entangles], ["only_empty"])
    parsed = _hlo.parse(ENTANGLE_HLO)
    by_name = {i.name: i for i in parsed.computations["main"]}
    self.assertEqual(by_name["only_empty"].aliased_operands, (0,))
    self.assertEqual(by_name["mixed"].aliased_operands, (0, 2))
    # Control: the same call with a witness of one element is not listed.
    one = ENTANGLE_HLO.replace("%e = f32[0]", "%e = f32[1]").replace(
      "(a: s32[], e: f32[0]", "(a: s32[], e: f32[1]"
    )
    self.assertEqual(testing.OrderAnalysis(one).empty_witness_entangles(), [])


class RacesAndBranchesTest(parameterized.TestCase):
  """Default races, exclusive branches, shared computations."""

  def test_default_races_are_user_native_calls(self):
    self.assertCountEqual(
      testing.races(NESTED_HLO),
      [
        ("r", "w"),
        ("r", "after"),
        ("r", "free"),
        ("w", "after"),
        ("w", "free"),
        ("first", "after"),
        ("first", "free"),
        ("after", "free"),
      ],
    )

  def test_races_among_selected(self):
    self.assertEqual(testing.races(NESTED_HLO, ["read", "write"]), [("r", "w")])

  def test_ops_in_two_branches_are_exclusive(self):
    analysis = testing.OrderAnalysis(EXCLUSIVE_HLO)
    branch_ops = ["b0_x", "b0_y", "in0", "in1", "b1_x"]
    # Only pairs that can run in one execution of %cnd race: the two calls
    # of branch 0, and each of them against the nested conditional's calls.
    self.assertCountEqual(
      analysis.races(branch_ops),
      [
        ("b0_x", "b0_y"),
        ("b0_x", "in0"),
        ("b0_x", "in1"),
        ("b0_y", "in0"),
        ("b0_y", "in1"),
      ],
    )
    # Loop body: its conditional's branches are exclusive, each races the
    # unordered call beside it.
    self.assertCountEqual(
      analysis.races(["lb0", "lb1", "body_other"]),
      [("lb0", "body_other"), ("lb1", "body_other")],
    )

  @parameterized.parameters(
    ("b0_x", "b1_x", True),
    ("in0", "b1_x", True),  # nested in branch 0 vs branch 1
    ("in0", "in1", True),  # two branches of the nested conditional
    ("lb0", "lb1", True),
    ("b0_x", "b0_y", False),  # the same branch
    ("in0", "b0_x", False),  # in branch 0, beside the nested conditional
    ("b0_x", "after", False),  # a branch and what follows the conditional
    ("b0_x", "free", False),
    ("lb0", "body_other", False),
    ("b1_x", "lb0", False),
    ("pre", "b0_x", False),
  )
  def test_exclusive_pairs(self, a, b, expected):
    analysis = testing.OrderAnalysis(EXCLUSIVE_HLO)
    (op_a,), (op_b,) = analysis.select_ops(a), analysis.select_ops(b)
    self.assertEqual(analysis.exclusive(op_a, op_b), expected)
    self.assertEqual(analysis.exclusive(op_b, op_a), expected)
    if expected:  # Exclusive: neither ordered nor racing.
      self.assertFalse(analysis.happens_before(a, b))
      self.assertFalse(analysis.happens_before(b, a))
      self.assertFalse(analysis.is_race(op_a, op_b))
      self.assertEqual(analysis.races([a, b]), [])

  def test_ops_around_a_conditional_follow_the_usual_rules(self):
    analysis = testing.OrderAnalysis(EXCLUSIVE_HLO)
    for inside in ("b0_x", "in1", "b1_x"):
      self.assertTrue(analysis.happens_before("pre", inside), inside)
      self.assertTrue(analysis.happens_before(inside, "after"), inside)
      self.assertEqual(analysis.races([inside, "free"]), [(inside, "free")])
    self.assertEqual(analysis.races(["b0_x", "after"]), [])

  def test_a_branch_called_elsewhere_too_is_not_exclusive(self):
    # %branch1 also runs from a call beside %cnd: b0_x and b1_x may then
    # both run, unordered.
    text = EXCLUSIVE_HLO.replace(
      "  %free = s32[] custom-call(%a)",
      "  %again = s32[] call(%a), to_apply=%branch1\n"
      "  %free = s32[] custom-call(%a, %again)",
    )
    analysis = testing.OrderAnalysis(text)
    self.assertLen(analysis.select_ops("b1_x"), 1)
    self.assertEqual(analysis.races(["b0_x", "b1_x"]), [("b0_x", "b1_x")])
    self.assertEqual(testing.races(EXCLUSIVE_HLO, ["b0_x", "b1_x"]), [])

  def test_branches_and_shared_computations(self):
    analysis = testing.OrderAnalysis(BRANCHES_HLO)
    self.assertTrue(analysis.happens_before("mid", "left"))
    self.assertTrue(analysis.happens_before("right", "end"))
    self.assertFalse(analysis.happens_before("left", "right"))
    self.assertFalse(analysis.happens_before("right", "left"))
    # "shared" runs both before and after "mid": ordered neither way.
    self.assertFalse(analysis.happens_before("shared", "mid"))
    self.assertFalse(analysis.happens_before("mid", "shared"))
    self.assertTrue(analysis.happens_before("shared", "end"))


class ParsingTest(absltest.TestCase):
  """What the parser accepts, and what it reads from metadata."""

  def test_selector_matching_nothing(self):
    with self.assertRaisesRegex(ValueError, r"Custom-call targets: \['after'"):
      testing.happens_before(NESTED_HLO, "missing", "read")

  def test_text_without_entry_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "ENTRY"):
      testing.races("HloModule empty, is_scheduled=true\n")

  def test_parentheses_and_colons_are_part_of_a_scope(self):
    # No supported XLA writes merged op names such as "(a/x:b/y)": a scope
    # is matched as written, component by component.
    text = NESTED_HLO.replace(
      'custom_call_target="free"',
      'custom_call_target="free", '
      'metadata={op_name="jit(f)/(a/sum:b (1)/sum)/tail"}',
    )
    analysis = testing.OrderAnalysis(text)
    for scope in ("(a", "sum:b (1)", "sum)", "tail", "(a/sum:b (1)/sum)"):
      self.assertEqual(analysis.select(scope), ["free"], scope)
    for scope in ("a", "b (1)", "a/sum/tail", "sum"):
      with self.assertRaisesRegex(ValueError, "matches no op"):
        analysis.select(scope)

  def test_source_file_metadata(self):
    text = NESTED_HLO.replace(
      'custom_call_target="free"',
      'custom_call_target="free", metadata={op_name="jit(f)/s\\303\\251/x" '
      'source_file="/x/y.py" source_line=7}',
    )
    (op,) = testing.OrderAnalysis(text).select_ops("s\u00e9")
    self.assertEqual((op.location, op.target), ("/x/y.py:7", "free"))


if __name__ == "__main__":
  absltest.main()
