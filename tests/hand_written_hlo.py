"""Hand-written HLO modules for the analysis tests, one instruction a line
as XLA prints them; `hlo_module` and `native` write small ones."""

NESTED_HLO = """
HloModule nested, is_scheduled=true

%fused (p0: f32[]) -> f32[] {
  %p0 = f32[] parameter(0)
  ROOT %neg = f32[] negate(f32[] %p0), metadata={op_name="jit(f)/prepare/neg"}
}

%body (b: (s32[], f32[])) -> (s32[], f32[]) {
  %b = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %v = f32[] get-tuple-element(%b), index=1
  %r = f32[] custom-call(%i), custom_call_target="read"
  %w = s32[] custom-call(%i, %v), custom_call_target="write", custom_call_has_side_effect=true
  ROOT %t = (s32[], f32[]) tuple(%w, %r)
}

%cond (c: (s32[], f32[])) -> pred[] {
  %c = (s32[], f32[]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %k = s32[] constant(10)
  ROOT %lt = pred[] compare(%ci, %k), direction=LT, metadata={op_name="jit(f)/while/cond/lt"}
}

ENTRY %main (a: s32[], x: f32[]) -> f32[] {
  %a = s32[] parameter(0)
  %x = f32[] parameter(1)
  %first = s32[] custom-call(%a), custom_call_target="first", custom_call_has_side_effect=true
  %f = f32[] fusion(%x), kind=kLoop, calls=%fused
  %tup = (s32[], f32[]) tuple(%first, %f)
  %loop = (s32[], f32[]) while(%tup), condition=%cond, body=%body
  %after = s32[] custom-call(%a), custom_call_target="after", custom_call_has_side_effect=true, control-predecessors={%loop}
  %free = s32[] custom-call(%a), custom_call_target="free", custom_call_has_side_effect=true
  ROOT %out = f32[] get-tuple-element(%loop), index=1
}
"""

BRANCHES_HLO = """
HloModule branches, is_scheduled=true

%left (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  ROOT %l = s32[] custom-call(%p), custom_call_target="left", custom_call_has_side_effect=true
}

%right (q: s32[]) -> s32[] {
  %q = s32[] parameter(0)
  ROOT %rr = s32[] custom-call(%q), custom_call_target="right", custom_call_has_side_effect=true
}

%shared (s: s32[]) -> s32[] {
  %s = s32[] parameter(0)
  ROOT %sh = s32[] custom-call(%s), custom_call_target="shared", custom_call_has_side_effect=true
}

ENTRY %main (a: s32[], k: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %k = s32[] parameter(1)
  %c1 = s32[] call(%a), to_apply=%shared
  %mid = s32[] custom-call(%c1), custom_call_target="mid", custom_call_has_side_effect=true
  %c2 = s32[] call(%mid), to_apply=%shared
  %cnd = s32[] conditional(%k, %c2, %c2), branch_computations={%left, %right}
  ROOT %end = s32[] custom-call(%cnd), custom_call_target="end", custom_call_has_side_effect=true
}
"""


# Async work: the read is wrapped in async-start/async-done; "early" uses only
# the start, "late" the done.
ASYNC_HLO = """
HloModule async, is_scheduled=true

%wrapped (p: s32[]) -> f32[] {
  %p = s32[] parameter(0)
  ROOT %r = f32[] custom-call(%p), custom_call_target="read"
}

%sum (u: f32[], v: f32[]) -> f32[] {
  %u = f32[] parameter(0)
  %v = f32[] parameter(1)
  ROOT %s = f32[] add(%u, %v)
}

ENTRY %main (a: s32[]) -> f32[] {
  %a = s32[] parameter(0)
  %before = s32[] custom-call(%a), custom_call_target="before", custom_call_has_side_effect=true
  %start = ((s32[]), f32[], u32[]) async-start(%before), calls=%wrapped
  %early = s32[] custom-call(%start), custom_call_target="early", custom_call_has_side_effect=true
  %done = f32[] async-done(%start)
  %late = s32[] custom-call(%done), custom_call_target="late", custom_call_has_side_effect=true
  %ar-start = f32[] all-reduce-start(%done), replica_groups={}, to_apply=%sum
  %mid = s32[] custom-call(%ar-start), custom_call_target="mid", custom_call_has_side_effect=true
  %ar-done = f32[] all-reduce-done(%ar-start)
  ROOT %end = f32[] custom-call(%ar-done), custom_call_target="end"
}
"""

# Entangle calls: one with a zero-size witness only; one aliasing operands 0
# and 2 (two payloads) with witnesses of either size.
ENTANGLE_HLO = """
HloModule entangles, is_scheduled=true

ENTRY %main (a: s32[], e: f32[0], w: f32[]) -> (s32[], (s32[], s32[])) {
  %a = s32[] parameter(0)
  %e = f32[0] parameter(1)
  %w = f32[] parameter(2)
  %only_empty = s32[] custom-call(%a, %e), custom_call_target="entangle_jax_entangle", output_to_operand_aliasing={{}: (0, {})}
  %mixed = (s32[], s32[]) custom-call(%a, %e, %a, %w), custom_call_target="entangle_jax_entangle", output_to_operand_aliasing={{0}: (0, {}), {1}: (2, {})}
  ROOT %out = (s32[], (s32[], s32[])) tuple(%only_empty, %mixed)
}
"""


# A loop that reads element 0 of its state and carries element 1 through.
LOOP_HLO = """
HloModule loop, is_scheduled=true

%body (b: (s32[], s32[])) -> (s32[], s32[]) {
  %b = (s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %c = s32[] get-tuple-element(%b), index=1
  %r = s32[] custom-call(%i), custom_call_target="inside"
  ROOT %t = (s32[], s32[]) tuple(%r, %c)
}

%cond (p: (s32[], s32[])) -> pred[] {
  %p = (s32[], s32[]) parameter(0)
  %pi = s32[] get-tuple-element(%p), index=0
  %k = s32[] constant(10)
  ROOT %lt = pred[] compare(%pi, %k), direction=LT
}

ENTRY %main (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %used = s32[] custom-call(%a), custom_call_target="used", custom_call_has_side_effect=true
  %carried = s32[] custom-call(%a), custom_call_target="carried", custom_call_has_side_effect=true
  %init = (s32[], s32[]) tuple(%used, %carried)
  %loop = (s32[], s32[]) while(%init), condition=%cond, body=%body
  %out1 = s32[] get-tuple-element(%loop), index=1
  %after_carried = s32[] custom-call(%out1), custom_call_target="after_carried"
  %out0 = s32[] get-tuple-element(%loop), index=0
  ROOT %after_loop = s32[] custom-call(%out0), custom_call_target="after_loop"
}
"""


# Conditionals: %cnd runs %branch0 (two unordered calls and a nested
# conditional) or %branch1; a loop body holds another conditional.
EXCLUSIVE_HLO = """
HloModule exclusive, is_scheduled=true

%inner0 (p0: s32[]) -> s32[] {
  %p0 = s32[] parameter(0)
  ROOT %in0 = s32[] custom-call(%p0), custom_call_target="in0", custom_call_has_side_effect=true
}

%inner1 (p1: s32[]) -> s32[] {
  %p1 = s32[] parameter(0)
  ROOT %in1 = s32[] custom-call(%p1), custom_call_target="in1", custom_call_has_side_effect=true
}

%branch0 (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %b0_x = s32[] custom-call(%p), custom_call_target="b0_x", custom_call_has_side_effect=true
  %b0_y = s32[] custom-call(%p), custom_call_target="b0_y", custom_call_has_side_effect=true
  %nested = s32[] conditional(%p, %p, %p), branch_computations={%inner0, %inner1}
  %xy = s32[] add(%b0_x, %b0_y)
  ROOT %all = s32[] add(%xy, %nested)
}

%branch1 (q: s32[]) -> s32[] {
  %q = s32[] parameter(0)
  ROOT %b1_x = s32[] custom-call(%q), custom_call_target="b1_x", custom_call_has_side_effect=true
}

%lbranch0 (r0: s32[]) -> s32[] {
  %r0 = s32[] parameter(0)
  ROOT %lb0 = s32[] custom-call(%r0), custom_call_target="lb0", custom_call_has_side_effect=true
}

%lbranch1 (r1: s32[]) -> s32[] {
  %r1 = s32[] parameter(0)
  ROOT %lb1 = s32[] custom-call(%r1), custom_call_target="lb1", custom_call_has_side_effect=true
}

%body (b: (s32[], s32[])) -> (s32[], s32[]) {
  %b = (s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %j = s32[] get-tuple-element(%b), index=1
  %lc = s32[] conditional(%i, %i, %i), branch_computations={%lbranch0, %lbranch1}
  %body_other = s32[] custom-call(%j), custom_call_target="body_other", custom_call_has_side_effect=true
  ROOT %t = (s32[], s32[]) tuple(%lc, %body_other)
}

%cond (c: (s32[], s32[])) -> pred[] {
  %c = (s32[], s32[]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %k10 = s32[] constant(10)
  ROOT %lt = pred[] compare(%ci, %k10), direction=LT
}

ENTRY %main (a: s32[], k: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %k = s32[] parameter(1)
  %pre = s32[] custom-call(%a), custom_call_target="pre", custom_call_has_side_effect=true
  %cnd = s32[] conditional(%k, %pre, %pre), branch_computations={%branch0, %branch1}
  %after = s32[] custom-call(%cnd), custom_call_target="after", custom_call_has_side_effect=true
  %free = s32[] custom-call(%a), custom_call_target="free", custom_call_has_side_effect=true
  %init = (s32[], s32[]) tuple(%a, %a)
  %loop = (s32[], s32[]) while(%init), condition=%cond, body=%body
  %out = s32[] get-tuple-element(%loop), index=0
  %s = s32[] add(%after, %free)
  ROOT %end = s32[] add(%s, %out)
}
"""


def hlo_module(entry: str, **computations: str) -> str:
  """A scheduled module: `entry`'s instruction lines as ENTRY %main, and each
  keyword's lines as the computation of that name (called ones first)."""
  parts = ["HloModule rules, is_scheduled=true", ""]
  for name, body in computations.items():
    parts += [f"%{name} {{", body.strip(), "}", ""]
  parts += ["ENTRY %main {", entry.strip(), "}", ""]
  return "\n".join(parts)


def native(name: str, *operands: str, shape: str = "s32[]", extra="") -> str:
  """One side-effecting custom call whose target is its own name."""
  listed = ", ".join(f"%{o}" for o in operands)
  return (
    f"%{name} = {shape} custom-call({listed}), custom_call_target="
    f'"{name}", custom_call_has_side_effect=true{extra}'
  )


def _scheduled(body: str) -> str:
  return "HloModule m, is_scheduled=true\n\n" + body


# Modules with a placeholder in braces, which a test replaces to make the
# positive case or its control.

# The loop's predicate is state element 1, returned by the condition as it
# is; the initial value of that element is %{init}.
PREDICATE = _scheduled("""
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
COND_BODY = _scheduled("""
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
CARRIED = _scheduled("""
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
BRANCH_READS = _scheduled("""
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
BRANCHES = _scheduled("""
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


def read_then_write(
  read: str, write: str, written: str, optimized: bool
) -> str:
  """A read of a handle, then a write of it with value `written` (``%x``,
  an argument, or ``%r``, the read's result, which orders the write after
  it): a module before optimization, or, `optimized`, a scheduled one.
  With ``%r``, the optimized module stands for one in which XLA's passes
  made the write depend on the read (the check reads operands as the
  edges; XLA:CPU ignores control-predecessors)."""
  scheduled = ", is_scheduled=true" if optimized else ""
  return f"""
HloModule jit_f{scheduled}

ENTRY %main (a: s32[], x: f32[]) -> (f32[], s32[]) {{
  %a = s32[] parameter(0)
  %x = f32[] parameter(1)
  %r = f32[] custom-call(%a), custom_call_target="{read}", metadata={{op_name="jit(f)/read" source_file="f.py" source_line=3}}
  %w = s32[] custom-call(%a, {written}), custom_call_target="{write}", custom_call_has_side_effect=true, metadata={{op_name="jit(f)/write" source_file="f.py" source_line=4}}
  ROOT %t = (f32[], s32[]) tuple(%r, %w)
}}
"""
