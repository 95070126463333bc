"""Each edge rule of entangle_jax.testing._order.edges, on hand-written HLO, with a
control: the same module without the edge gives the opposite answer."""

from absl.testing import absltest

from entangle_jax import testing


def module(body: str) -> str:
  return "HloModule m, is_scheduled=true\n\n" + body


def happens_before(text: str, before: str, after: str) -> bool:
  return testing.happens_before(text, before, after)


# C reads %{src}: A's result, or the parameter.
OPERAND = module("""
ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %c = s32[] custom-call(%{src}), custom_call_target="C", custom_call_has_side_effect=true
}
""")

# C reads element {k} of the inner tuple (A, B), nested in ((A, B), T).
NESTED_TUPLES = module("""
ENTRY %main (p: s32[]) -> f32[] {
  %p = s32[] parameter(0)
  %a = f32[] custom-call(%p), custom_call_target="A"
  %b = f32[] custom-call(%p), custom_call_target="B"
  %t = f32[] custom-call(%p), custom_call_target="T"
  %inner = (f32[], f32[]) tuple(%a, %b)
  %outer = ((f32[], f32[]), f32[]) tuple(%inner, %t)
  %g0 = (f32[], f32[]) get-tuple-element(%outer), index=0
  %g1 = f32[] get-tuple-element(%g0), index={k}
  ROOT %c = f32[] custom-call(%g1), custom_call_target="C"
}
""")

# A's result has {n} elements.
SIZED = module("""
ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[{n}] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %c = s32[] custom-call(%a), custom_call_target="C", custom_call_has_side_effect=true
}
""")

# C names A as a control predecessor, and reads %{src}.
CONTROL = module("""
ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %c = s32[] custom-call(%{src}), custom_call_target="C", custom_call_has_side_effect=true, control-predecessors={%a}
}
""")

# The loop's predicate is state element 1, returned by the condition as it
# is; the initial value of that element is %{init}.
PREDICATE = module("""
%body (b: (s32[], pred[])) -> (s32[], pred[]) {
  %b = (s32[], pred[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %w = s32[] custom-call(%i), custom_call_target="W", custom_call_has_side_effect=true
  %f = pred[] constant(false)
  ROOT %t = (s32[], pred[]) tuple(%w, %f)
}

%cond (c: (s32[], pred[])) -> pred[] {
  %c = (s32[], pred[]) parameter(0)
  ROOT %go = pred[] get-tuple-element(%c), index=1
}

ENTRY %main (p: s32[], q: pred[]) -> (s32[], pred[]) {
  %p = s32[] parameter(0)
  %q = pred[] parameter(1)
  %r = pred[] custom-call(%p), custom_call_target="R"
  %init = (s32[], pred[]) tuple(%p, %{init})
  %loop = (s32[], pred[]) while(%init), condition=%cond, body=%body
  ROOT %out = (pred[], (s32[], pred[])) tuple(%r, %loop)
}
""")

# Q runs in the loop's condition, W in its body; {extra} may add a second
# query to the body.
COND_BODY = module("""
%body (b: (s32[], f32[])) -> (s32[], f32[]) {
  %b = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %v = f32[] get-tuple-element(%b), index=1
  %w = s32[] custom-call(%i), custom_call_target="W", custom_call_has_side_effect=true
  {extra}
  ROOT %t = (s32[], f32[]) tuple(%w, %v)
}

%cond (c: (s32[], f32[])) -> pred[] {
  %c = (s32[], f32[]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %q = f32[] custom-call(%ci), custom_call_target="Q"
  %k = f32[] constant(1)
  ROOT %lt = pred[] compare(%q, %k), direction=LT
}

ENTRY %main (p: s32[], x: f32[]) -> s32[] {
  %p = s32[] parameter(0)
  %x = f32[] parameter(1)
  %init = (s32[], f32[]) tuple(%p, %x)
  %loop = (s32[], f32[]) while(%init), condition=%cond, body=%body
  ROOT %out = s32[] get-tuple-element(%loop), index=0
}
""")

# The body carries state element 1 through ({second} = c) or replaces it
# with its call's result ({second} = in).
CARRIED = module("""
%body (b: (s32[], s32[])) -> (s32[], s32[]) {
  %b = (s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %c = s32[] get-tuple-element(%b), index=1
  %in = s32[] custom-call(%i), custom_call_target="IN", custom_call_has_side_effect=true
  ROOT %t = (s32[], s32[]) tuple(%in, %{second})
}

%cond (p: (s32[], s32[])) -> pred[] {
  %p = (s32[], s32[]) parameter(0)
  ROOT %f = pred[] constant(false)
}

ENTRY %main (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %x = s32[] custom-call(%a), custom_call_target="X", custom_call_has_side_effect=true
  %init = (s32[], s32[]) tuple(%a, %x)
  %loop = (s32[], s32[]) while(%init), condition=%cond, body=%body
  %out = s32[] get-tuple-element(%loop), index=1
  ROOT %after = s32[] custom-call(%out), custom_call_target="AFTER", custom_call_has_side_effect=true
}
""")

# Branch 0 reads element {k} of the operand tuple (A's result, the
# parameter); branch 1 reads nothing.
BRANCH_READS = module("""
%b0 (t: (s32[], s32[])) -> s32[] {
  %t = (s32[], s32[]) parameter(0)
  %e = s32[] get-tuple-element(%t), index={k}
  ROOT %in = s32[] custom-call(%e), custom_call_target="IN", custom_call_has_side_effect=true
}

%b1 (u: (s32[], s32[])) -> s32[] {
  %u = (s32[], s32[]) parameter(0)
  ROOT %z = s32[] constant(0)
}

ENTRY %main (p: s32[], k: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %k = s32[] parameter(1)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %tup = (s32[], s32[]) tuple(%a, %p)
  ROOT %cnd = s32[] conditional(%k, %tup, %tup), branch_computations={%b0, %b1}
}
""")

# Branch 0 holds X (and {extra}), branch 1 holds Y.
BRANCHES = module("""
%b0 (t: s32[]) -> s32[] {
  %t = s32[] parameter(0)
  %x = s32[] custom-call(%t), custom_call_target="X", custom_call_has_side_effect=true
  {extra}
  ROOT %r0 = s32[] copy(%x)
}

%b1 (u: s32[]) -> s32[] {
  %u = s32[] parameter(0)
  ROOT %y = s32[] custom-call(%u), custom_call_target="Y", custom_call_has_side_effect=true
}

ENTRY %main (p: s32[], k: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %k = s32[] parameter(1)
  ROOT %cnd = s32[] conditional(%k, %p, %p), branch_computations={%b0, %b1}
}
""")

# The called computation reads its parameter %{param}: A's result (x) or
# the module's parameter (y).
CALL_READS = module("""
%callee (x: s32[], y: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  %y = s32[] parameter(1)
  ROOT %in = s32[] custom-call(%{param}), custom_call_target="IN", custom_call_has_side_effect=true
}

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %c = s32[] call(%a, %p), to_apply=%callee
}
""")

# R runs between async-start and async-done; AFTER reads %{src}.
ASYNC = module("""
%wrapped (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  ROOT %r = s32[] custom-call(%p), custom_call_target="R", custom_call_has_side_effect=true
}

ENTRY %main (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %start = ((s32[]), s32[], u32[]) async-start(%a), calls=%wrapped
  %done = s32[] async-done(%start)
  ROOT %after = s32[] custom-call(%{src}), custom_call_target="AFTER", custom_call_has_side_effect=true
}
""")

# IN runs inside a fusion that reads %{src}.
FUSION = module("""
%fused (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %in = s32[] custom-call(%x), custom_call_target="IN", custom_call_has_side_effect=true
}

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %f = s32[] fusion(%{src}), kind=kCustom, calls=%fused
}
""")


class EdgeRulesTest(absltest.TestCase):
  def test_an_operand_orders(self):
    self.assertTrue(happens_before(OPERAND.replace("{src}", "a"), "A", "C"))
    # Control: C reads the parameter instead.
    self.assertFalse(happens_before(OPERAND.replace("{src}", "p"), "A", "C"))

  def test_only_the_nested_tuple_element_read_orders(self):
    text = NESTED_TUPLES.replace("{k}", "1")
    self.assertTrue(happens_before(text, "B", "C"))
    self.assertFalse(happens_before(text, "A", "C"))
    self.assertFalse(happens_before(text, "T", "C"))
    # Control: reading element 0 orders A, and not B.
    text = NESTED_TUPLES.replace("{k}", "0")
    self.assertTrue(happens_before(text, "A", "C"))
    self.assertFalse(happens_before(text, "B", "C"))

  def test_a_zero_size_value_orders_nothing(self):
    self.assertFalse(happens_before(SIZED.replace("{n}", "0"), "A", "C"))
    # Control: one element is enough.
    self.assertTrue(happens_before(SIZED.replace("{n}", "1"), "A", "C"))

  def test_control_predecessors_order_nothing(self):
    self.assertFalse(happens_before(CONTROL.replace("{src}", "p"), "A", "C"))
    # Control: the same dependency as an operand orders.
    self.assertTrue(happens_before(CONTROL.replace("{src}", "a"), "A", "C"))

  def test_a_bare_predicate_element_is_a_use_of_its_producer(self):
    self.assertTrue(happens_before(PREDICATE.replace("{init}", "r"), "R", "W"))
    # Control: the predicate starts from the parameter; the loop then reads
    # nothing R produced.
    self.assertFalse(happens_before(PREDICATE.replace("{init}", "q"), "R", "W"))

  def test_a_loops_condition_and_body_are_sequenced(self):
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

  def test_a_carried_element_is_the_initial_values_buffer(self):
    text = CARRIED.replace("{second}", "c")
    self.assertTrue(happens_before(text, "X", "AFTER"))
    self.assertFalse(happens_before(text, "IN", "AFTER"))
    # Control: once the body writes element 1, the reader waits for the loop.
    self.assertTrue(
      happens_before(CARRIED.replace("{second}", "in"), "IN", "AFTER")
    )

  def test_a_conditional_reads_only_what_its_branches_read(self):
    self.assertFalse(
      happens_before(BRANCH_READS.replace("{k}", "1"), "A", "IN")
    )
    # Control: the branch reads A's element.
    self.assertTrue(happens_before(BRANCH_READS.replace("{k}", "0"), "A", "IN"))

  def test_ops_in_two_branches_are_exclusive(self):
    analysis = testing.OrderAnalysis(BRANCHES.replace("{extra}", ""))
    self.assertEqual(analysis.races(), [])
    (x,), (y,) = analysis.select_ops("X"), analysis.select_ops("Y")
    self.assertTrue(analysis.exclusive(x, y))
    # Control: two unordered calls in one branch race.
    extra = '%x2 = s32[] custom-call(%t), custom_call_target="X2", custom_call_has_side_effect=true'
    text = BRANCHES.replace("{extra}", extra)
    self.assertEqual(testing.races(text), [("x", "x2")])

  def test_a_call_reads_only_the_parameters_its_computation_reads(self):
    self.assertFalse(
      happens_before(CALL_READS.replace("{param}", "y"), "A", "IN")
    )
    # Control: the computation reads A's result.
    self.assertTrue(
      happens_before(CALL_READS.replace("{param}", "x"), "A", "IN")
    )

  def test_an_async_pair_ends_at_its_done(self):
    self.assertFalse(
      happens_before(ASYNC.replace("{src}", "start"), "R", "AFTER")
    )
    # Control: depending on the done orders.
    self.assertTrue(
      happens_before(ASYNC.replace("{src}", "done"), "R", "AFTER")
    )

  def test_an_op_in_a_fusion_is_ordered_through_the_fusion(self):
    self.assertTrue(happens_before(FUSION.replace("{src}", "a"), "A", "IN"))
    # Control: the fusion does not read A's result.
    self.assertFalse(happens_before(FUSION.replace("{src}", "p"), "A", "IN"))

  def test_a_computation_nothing_calls_never_runs(self):
    dead = module("""
%unused (u: s32[]) -> s32[] {
  %u = s32[] parameter(0)
  ROOT %d = s32[] custom-call(%u), custom_call_target="D", custom_call_has_side_effect=true
}

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %a = s32[] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  ROOT %c = s32[] {call}
}
""")
    self.assertEqual(testing.races(dead.replace("{call}", "add(%p, %p)")), [])
    # Control: once the entry calls it, D runs and races with A.
    called = dead.replace("{call}", "call(%p), to_apply=%unused")
    self.assertEqual(testing.races(called), [("d", "a")])


if __name__ == "__main__":
  absltest.main()
