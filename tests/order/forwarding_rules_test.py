"""Elements that a loop, call or conditional passes on unchanged, and what
loops inside loops read: hand-written HLO (jax rarely emits these shapes),
each with a control that gives the opposite answer.

XLA gives a result element that a computation's root passes on unchanged
the operand's buffer, and the loop, call or conditional thunk touches only
the buffers of the ops inside it: an op reading that element waits for the
operand's producer, not for the ops inside.
"""

from absl.testing import absltest

from entangle_jax import testing

HEADER = "HloModule m, is_scheduled=true\n\n"

# The call's computation returns element 0 of its parameter as {element0}
# (%e0: passed on; %m: written by M inside) next to N's result.
CALL = (
  HEADER
  + """
%callee (cp: (f32[4], s32[])) -> (f32[4], s32[]) {
  %cp = (f32[4], s32[]) parameter(0)
  %e0 = f32[4] get-tuple-element(%cp), index=0
  %e1 = s32[] get-tuple-element(%cp), index=1
  %m = f32[4] custom-call(%e0), custom_call_target="M"
  %n = s32[] custom-call(%e1), custom_call_target="N", custom_call_has_side_effect=true
  ROOT %r = (f32[4], s32[]) tuple(%{element0}, %n)
}

ENTRY %main (p: s32[]) -> f32[] {
  %p = s32[] parameter(0)
  %a = f32[4] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %tp = (f32[4], s32[]) tuple(%a, %p)
  %cl = (f32[4], s32[]) call(%tp), to_apply=%callee
  %g = f32[4] get-tuple-element(%cl), index=0
  ROOT %x = f32[] custom-call(%g), custom_call_target="X", custom_call_has_side_effect=true
}
"""
)

# Branch 0 passes element 0 on; branch 1 returns {element0} there.
CONDITIONAL = (
  HEADER
  + """
%b0 (b0p: (f32[4], s32[])) -> (f32[4], s32[]) {
  %b0p = (f32[4], s32[]) parameter(0)
  %b00 = f32[4] get-tuple-element(%b0p), index=0
  %b01 = s32[] get-tuple-element(%b0p), index=1
  %n0 = s32[] custom-call(%b01), custom_call_target="N0", custom_call_has_side_effect=true
  ROOT %b0r = (f32[4], s32[]) tuple(%b00, %n0)
}

%b1 (b1p: (f32[4], s32[])) -> (f32[4], s32[]) {
  %b1p = (f32[4], s32[]) parameter(0)
  %b10 = f32[4] get-tuple-element(%b1p), index=0
  %m1 = f32[4] custom-call(%b10), custom_call_target="M1"
  %b11 = s32[] get-tuple-element(%b1p), index=1
  %n1 = s32[] custom-call(%b11), custom_call_target="N1", custom_call_has_side_effect=true
  ROOT %b1r = (f32[4], s32[]) tuple(%{element0}, %n1)
}

ENTRY %main (p: s32[], i: s32[]) -> f32[] {
  %p = s32[] parameter(0)
  %i = s32[] parameter(1)
  %a = f32[4] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %tp = (f32[4], s32[]) tuple(%a, %p)
  %cd = (f32[4], s32[]) conditional(%i, %tp, %tp), branch_computations={%b0, %b1}
  %g = f32[4] get-tuple-element(%cd), index=0
  ROOT %x = f32[] custom-call(%g), custom_call_target="X", custom_call_has_side_effect=true
}
"""
)

# State element 0 is the pair (A, B); the body returns {element0} for it:
# the pair as one get-tuple-element, the pair rebuilt element by element,
# or a pair whose first element M wrote.
NESTED_LOOP_STATE = (
  HEADER
  + """
%cond (cp: ((f32[4], f32[4]), s32[])) -> pred[] {
  %cp = ((f32[4], f32[4]), s32[]) parameter(0)
  %ce = s32[] get-tuple-element(%cp), index=1
  ROOT %pr = pred[] custom-call(%ce), custom_call_target="Q", custom_call_has_side_effect=true
}

%body (bp: ((f32[4], f32[4]), s32[])) -> ((f32[4], f32[4]), s32[]) {
  %bp = ((f32[4], f32[4]), s32[]) parameter(0)
  %in = (f32[4], f32[4]) get-tuple-element(%bp), index=0
  %x0 = f32[4] get-tuple-element(%in), index=0
  %x1 = f32[4] get-tuple-element(%in), index=1
  %m = f32[4] custom-call(%x1), custom_call_target="M"
  %rebuilt = (f32[4], f32[4]) tuple(%x0, %x1)
  %written = (f32[4], f32[4]) tuple(%m, %x1)
  %be = s32[] get-tuple-element(%bp), index=1
  %n = s32[] custom-call(%be), custom_call_target="N", custom_call_has_side_effect=true
  ROOT %br = ((f32[4], f32[4]), s32[]) tuple(%{element0}, %n)
}

ENTRY %main (p: s32[]) -> f32[] {
  %p = s32[] parameter(0)
  %a = f32[4] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %b = f32[4] custom-call(%p), custom_call_target="B", custom_call_has_side_effect=true
  %ab = (f32[4], f32[4]) tuple(%a, %b)
  %init = ((f32[4], f32[4]), s32[]) tuple(%ab, %p)
  %w = ((f32[4], f32[4]), s32[]) while(%init), condition=%cond, body=%body
  %o = (f32[4], f32[4]) get-tuple-element(%w), index=0
  %oa = f32[4] get-tuple-element(%o), index=0
  ROOT %x = f32[] custom-call(%oa), custom_call_target="X", custom_call_has_side_effect=true
}
"""
)

# An outer loop whose body runs {inner}: an inner loop that carries element
# 0 (A's result) and works on element 1, or the same work written directly,
# reading element 0 too.
INNER_LOOP = (
  HEADER
  + """
%icond (ic: (f32[4], s32[])) -> pred[] {
  %ic = (f32[4], s32[]) parameter(0)
  %ie = s32[] get-tuple-element(%ic), index=1
  ROOT %ip = pred[] custom-call(%ie), custom_call_target="Q", custom_call_has_side_effect=true
}

%ibody (ib: (f32[4], s32[])) -> (f32[4], s32[]) {
  %ib = (f32[4], s32[]) parameter(0)
  %ib0 = f32[4] get-tuple-element(%ib), index=0
  %ib1 = s32[] get-tuple-element(%ib), index=1
  %nw = s32[] custom-call(%ib1), custom_call_target="N", custom_call_has_side_effect=true
  ROOT %ir = (f32[4], s32[]) tuple(%ib0, %nw)
}

%ocond (oc: (f32[4], s32[])) -> pred[] {
  %oc = (f32[4], s32[]) parameter(0)
  %oe = s32[] get-tuple-element(%oc), index=1
  ROOT %op = pred[] custom-call(%oe), custom_call_target="Q2", custom_call_has_side_effect=true
}

%obody (ob: (f32[4], s32[])) -> (f32[4], s32[]) {
  %ob = (f32[4], s32[]) parameter(0)
{inner}
  ROOT %orr = (f32[4], s32[]) tuple(%o0, %o1)
}

ENTRY %main (p: s32[]) -> (f32[4], s32[]) {
  %p = s32[] parameter(0)
  %a = f32[4] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %tp = (f32[4], s32[]) tuple(%a, %p)
  ROOT %w = (f32[4], s32[]) while(%tp), condition=%ocond, body=%obody
}
"""
)
INNER_WHILE = """\
  %inner = (f32[4], s32[]) while(%ob), condition=%icond, body=%ibody
  %o0 = f32[4] get-tuple-element(%inner), index=0
  %o1 = s32[] get-tuple-element(%inner), index=1"""
DIRECT_READ = """\
  %ob0 = f32[4] get-tuple-element(%ob), index=0
  %o0 = f32[4] custom-call(%ob0), custom_call_target="R"
  %ob1 = s32[] get-tuple-element(%ob), index=1
  %o1 = s32[] custom-call(%ob1), custom_call_target="ND", custom_call_has_side_effect=true"""

# Branches 0 and 1 run %b0, branch 2 runs %b1, whose X reads its operand.
REPEATED_BRANCH = (
  HEADER
  + """
%b0 (p0: f32[4]) -> s32[] {
  %p0 = f32[4] parameter(0)
  ROOT %k0 = s32[] constant(0)
}

%b1 (p1: f32[4]) -> s32[] {
  %p1 = f32[4] parameter(0)
  ROOT %x = s32[] custom-call(%p1), custom_call_target="X", custom_call_has_side_effect=true
}

ENTRY %main (p: s32[], i: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %i = s32[] parameter(1)
  %a = f32[4] custom-call(%p), custom_call_target="A", custom_call_has_side_effect=true
  %b = f32[4] custom-call(%p), custom_call_target="B", custom_call_has_side_effect=true
  %c = f32[4] custom-call(%p), custom_call_target="C", custom_call_has_side_effect=true
  ROOT %cd = s32[] conditional(%i, %a, %b, %c), branch_computations={branches}
}
"""
)


def ordered(text: str, before: str, after: str) -> bool:
  return testing.happens_before(text, before, after)


def fill(template: str, **fields: str) -> str:
  for key, value in fields.items():
    template = template.replace("{" + key + "}", value)
  return template


class ForwardingTest(absltest.TestCase):
  def test_call_passes_an_element_on(self):
    passed = fill(CALL, element0="e0")
    self.assertTrue(ordered(passed, "A", "X"))
    self.assertFalse(ordered(passed, "N", "X"))  # X may overlap the call.
    self.assertIn(("n", "x"), testing.races(passed))
    written = fill(CALL, element0="m")  # Control: M writes X's input.
    self.assertTrue(ordered(written, "A", "X"))
    self.assertTrue(ordered(written, "N", "X"))
    self.assertNotIn(("n", "x"), testing.races(written))

  def test_conditional_whose_branches_all_pass_an_element_on(self):
    passed = fill(CONDITIONAL, element0="b10")
    self.assertTrue(ordered(passed, "A", "X"))
    self.assertFalse(ordered(passed, "N0", "X"))
    self.assertFalse(ordered(passed, "N1", "X"))
    # Control: where one branch writes the element, X waits for the
    # conditional, so for what either branch does.
    written = fill(CONDITIONAL, element0="m1")
    self.assertTrue(ordered(written, "A", "X"))
    self.assertTrue(ordered(written, "N0", "X"))
    self.assertTrue(ordered(written, "N1", "X"))

  def test_loop_passes_on_a_nested_element_however_rebuilt(self):
    for element0 in ("in", "rebuilt"):
      with self.subTest(element0):
        passed = fill(NESTED_LOOP_STATE, element0=element0)
        self.assertTrue(ordered(passed, "A", "X"))
        self.assertFalse(ordered(passed, "N", "X"))
        self.assertFalse(ordered(passed, "B", "X"))
    written = fill(NESTED_LOOP_STATE, element0="written")  # Control.
    self.assertTrue(ordered(written, "N", "X"))
    self.assertTrue(ordered(written, "B", "X"))  # M read B, inside the loop.

  def test_inner_loop_reads_only_what_its_computations_read(self):
    nested = fill(INNER_LOOP, inner=INNER_WHILE)
    for after in ("N", "Q", "Q2"):
      with self.subTest(after):
        self.assertFalse(ordered(nested, "A", after))
    self.assertContainsSubset(
      [("ip", "a"), ("nw", "a"), ("op", "a")], testing.races(nested)
    )
    # Control: R reads element 0 in the outer body, so the outer loop waits
    # for A, and so do its condition and body (ND does N's work there).
    direct = fill(INNER_LOOP, inner=DIRECT_READ)
    for after in ("ND", "Q2"):
      with self.subTest(f"control {after}"):
        self.assertTrue(ordered(direct, "A", after))

  def test_a_repeated_branch_computation_runs_on_each_branch_operand(self):
    repeated = fill(REPEATED_BRANCH, branches="{%b0, %b0, %b1}")
    self.assertTrue(ordered(repeated, "C", "X"))
    self.assertFalse(ordered(repeated, "B", "X"))
    # Control: with %b1 as branch 1, X runs on branch 1's operand, B's.
    moved = fill(REPEATED_BRANCH, branches="{%b0, %b1, %b0}")
    self.assertTrue(ordered(moved, "B", "X"))
    self.assertFalse(ordered(moved, "C", "X"))

  def test_graph_names_every_branch_a_computation_serves(self):
    repeated = fill(REPEATED_BRANCH, branches="{%b1, %b0, %b1}")
    graph = testing.order_graph(repeated)
    self.assertIn("branches 0, 2 of cd", graph)
    single = fill(REPEATED_BRANCH, branches="{%b0, %b0, %b1}")
    self.assertIn("branch 2 of cd", testing.order_graph(single))


if __name__ == "__main__":
  absltest.main()
