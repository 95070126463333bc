"""happens_before / races on compiled modules and on hand-written HLO."""

import os
import re
from typing import Any, cast

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import _hazard, _hlo_parse, entangle, testing
from entangle_jax._hazard import Ordering
from tests import test_util  # sets up 8 CPU devices

WRITE = "entangle_jax_write_slot"
READ = "entangle_jax_read_slot"
THIS_FILE = os.path.basename(__file__)


def compile_hazard(ordering):
  fn = jax.jit(_hazard.program(ordering))
  return fn.lower(*_hazard.arguments()).compile()


def hazard_step(token, y, ordering):
  """One write -> read -> write round; returns the new token and payload."""
  with jax.named_scope("first_write"):
    token = testing.write_slot(token, jnp.float32(1.0))
  with jax.named_scope("read"):
    x = testing.read_slot(token)
  if ordering is Ordering.ENTANGLE:
    token, y = entangle((token, y), x)
  elif ordering is Ordering.OPTIMIZATION_BARRIER:
    token, x = jax.lax.optimization_barrier((token, x))
  with jax.named_scope("second_write"):
    token = testing.write_slot(token, jnp.float32(2.0))
  return token, y * x


def compiled(fn, *args):
  return jax.jit(fn).lower(*args).compile()


ORDERED = parameterized.parameters(
  (Ordering.NONE, False), (Ordering.ENTANGLE, True)
)


class CompiledHazardTest(parameterized.TestCase):
  def test_no_ordering_races(self):
    c = compile_hazard(Ordering.NONE)
    analysis = testing.OrderAnalysis(c)
    self.assertFalse(testing.happens_before(c, "read", "second_write"))
    self.assertTrue(testing.happens_before(c, "first_write", "read"))
    (read,) = analysis.select(READ)
    (second,) = analysis.select("second_write")
    self.assertEqual(analysis.races([READ, WRITE]), [(read, second)])

  @ORDERED
  def test_default_races_find_the_demo_hazard(self, ordering, ordered):
    # read_slot is neither side-effecting nor aliasing: it must be looked at.
    c = compile_hazard(ordering)
    analysis = testing.OrderAnalysis(c)
    (read,) = analysis.select("read")
    (second,) = analysis.select("second_write")
    expected = [] if ordered else [{read, second}]
    self.assertEqual([set(race) for race in testing.races(c)], expected)

  def test_optimization_barrier_does_not_order_on_cpu(self):
    c = compile_hazard(Ordering.OPTIMIZATION_BARRIER)
    self.assertFalse(testing.happens_before(c, "read", "second_write"))
    self.assertLen(testing.races(c, [READ, WRITE]), 1)

  def test_entangle_orders(self):
    c = compile_hazard(Ordering.ENTANGLE)
    self.assertTrue(testing.happens_before(c, "read", "second_write"))
    self.assertTrue(testing.happens_before(c, READ, "second_write"))
    self.assertEqual(testing.races(c, [READ, WRITE]), [])
    self.assertFalse(testing.happens_before(c, "second_write", "read"))

  def test_accepts_hlo_text_and_lowered(self):
    lowered = jax.jit(_hazard.program(Ordering.ENTANGLE)).lower(
      *_hazard.arguments()
    )
    text = testing.module_text(lowered.compile())
    self.assertTrue(testing.happens_before(text, "read", "second_write"))
    self.assertTrue(testing.happens_before(lowered, "read", "second_write"))
    lowered_none = jax.jit(_hazard.program(Ordering.NONE)).lower(
      *_hazard.arguments()
    )
    self.assertFalse(
      testing.happens_before(lowered_none, "read", "second_write")
    )

  def test_rejects_what_is_not_compiled(self):
    fn = jax.jit(_hazard.program(Ordering.ENTANGLE))
    with self.assertRaisesRegex(TypeError, "jax.stages.Compiled.*PjitFunc"):
      testing.happens_before(cast(Any, fn), "read", "second_write")

  @ORDERED
  def test_inside_scan_body(self, ordering, ordered):
    def loop(token, y):
      def body(carry, _):
        return hazard_step(*carry, ordering), None

      return jax.lax.scan(body, (token, y), None, length=5)[0]

    c = compiled(loop, jnp.int32(0), jnp.float32(1))
    self.assertIn(" while(", testing.module_text(c))
    self.assertEqual(testing.happens_before(c, "read", "second_write"), ordered)
    self.assertTrue(testing.happens_before(c, "first_write", "read"))

  @ORDERED
  def test_inside_while_loop_body(self, ordering, ordered):
    def loop(token, y):
      def body(carry):
        i, token, y = carry
        token, y = hazard_step(token, y, ordering)
        return i + 1, token, y

      return jax.lax.while_loop(lambda c: c[0] < 3, body, (0, token, y))

    c = compiled(loop, jnp.int32(0), jnp.float32(1))
    self.assertIn(" while(", testing.module_text(c))
    self.assertEqual(testing.happens_before(c, "read", "second_write"), ordered)
    self.assertEqual(len(testing.races(c)) == 0, ordered)

  @ORDERED
  def test_inside_cond_branch(self, ordering, ordered):
    def branchy(p, token, y):
      return jax.lax.cond(
        p,
        lambda t, v: hazard_step(t, v, ordering),
        lambda t, v: (t, v),
        token,
        y,
      )

    c = compiled(branchy, True, jnp.int32(0), jnp.float32(1))
    self.assertIn(" conditional(", testing.module_text(c))
    self.assertEqual(testing.happens_before(c, "read", "second_write"), ordered)

  @ORDERED
  def test_under_vmap(self, ordering, ordered):
    fn = jax.vmap(lambda t, y: hazard_step(t, y, ordering))
    c = compiled(fn, jnp.arange(3, dtype=jnp.int32), jnp.ones(3))
    self.assertEqual(testing.happens_before(c, "read", "second_write"), ordered)

  @ORDERED
  def test_under_grad(self, ordering, ordered):
    def loss(y):
      _, y = hazard_step(jnp.int32(0), y, ordering)
      return jnp.sum(y)

    c = compiled(jax.grad(loss), jnp.ones(3))
    self.assertEqual(testing.happens_before(c, "read", "second_write"), ordered)

  @ORDERED
  def test_several_payload_leaves(self, ordering, ordered):
    def fn(token, a, b):
      with jax.named_scope("read"):
        x = testing.read_slot(token)
      if ordering is Ordering.ENTANGLE:
        token, a, b = entangle((token, a, b), x)
      with jax.named_scope("use_a"):
        a = testing.write_slot(a, jnp.float32(0))
      with jax.named_scope("use_b"):
        b = testing.write_slot(b, jnp.float32(0))
      return token, a, b, x  # x: keep the read without entangle too

    c = compiled(fn, jnp.int32(0), jnp.int32(1), jnp.int32(2))
    self.assertEqual(testing.happens_before(c, "read", "use_a"), ordered)
    self.assertEqual(testing.happens_before(c, "read", "use_b"), ordered)
    self.assertFalse(testing.happens_before(c, "use_a", "use_b"))

  def test_unknown_selector_lists_what_exists(self):
    c = compile_hazard(Ordering.ENTANGLE)
    with self.assertRaisesRegex(
      ValueError, r"'nothing'.*entangle_jax_read_slot.*second_write"
    ):
      testing.happens_before(c, "nothing", "read")


class ScopeSelectorTest(parameterized.TestCase):
  """A named scope selects the effectful work in it, not the arithmetic."""

  @ORDERED
  def test_arithmetic_in_the_scope_is_not_selected(self, ordering, ordered):
    def fn(slot, v):
      with jax.named_scope("w1"):
        t = testing.write_slot(slot, 1.0)
      with jax.named_scope("r1"):
        x = testing.read_slot(t)
      if ordering is Ordering.ENTANGLE:
        t = entangle(t, x)
      with jax.named_scope("w2"):
        testing.write_slot(t, v * 2.0)  # the multiply is in "w2" too
      return x

    c = compiled(fn, jnp.int32(0), jnp.float32(3))
    self.assertEqual(testing.happens_before(c, "r1", "w2"), ordered)
    (w2,) = testing.OrderAnalysis(c).select_ops("w2")
    self.assertEqual(w2.target, WRITE)
    # Explicitly asking for every op brings the multiply back, and it is
    # rightly not ordered after the read.
    all_w2 = testing.OrderAnalysis(c, all_ops=True).select("w2")
    self.assertGreater(len(all_w2), 1)
    self.assertFalse(testing.happens_before(c, "r1", "w2", all_ops=True))

  @ORDERED
  def test_derived_ops_in_a_scan_are_not_selected(self, ordering, ordered):
    # XLA copies the read's op_name onto a bitcast/copy it derives for the
    # scan's stacked output; only the custom call is selected.
    def loop(token):
      def body(t, _):
        with jax.named_scope("r1"):
          x = testing.read_slot(t)
        if ordering is Ordering.ENTANGLE:
          t = entangle(t, x)
        with jax.named_scope("w2"):
          t = testing.write_slot(t, 2.0)
        return t, x

      return jax.lax.scan(body, token, None, length=4)

    c = compiled(loop, jnp.int32(0))
    (selected,) = testing.OrderAnalysis(c).select_ops("r1")
    self.assertEqual(selected.target, READ)
    self.assertEqual(testing.happens_before(c, "r1", "w2"), ordered)

  def test_non_ascii_and_quoted_scope_names(self):
    name = 'caf\u00e9 "q" \u2192'

    def fn(slot):
      with jax.named_scope(name):
        return testing.write_slot(slot, 1.0)

    c = compiled(fn, jnp.int32(0))
    self.assertIn("\\303\\251", testing.module_text(c))  # HLO escapes it
    (op,) = testing.OrderAnalysis(c).select_ops(name)
    self.assertEqual(op.target, WRITE)
    self.assertIn(name, op.scope)

  @parameterized.parameters("a/b", "solve (v2)", "f(x)", "vmap(me)")
  def test_scope_names_with_slashes_and_parentheses(self, name):
    def fn(slot):
      with jax.named_scope("other"):
        t = testing.write_slot(slot, 1.0)
      with jax.named_scope(name):
        return testing.read_slot(t)

    c = compiled(fn, jnp.int32(0))
    (op,) = testing.OrderAnalysis(c).select_ops(name)
    self.assertEqual(op.target, READ)
    self.assertTrue(testing.happens_before(c, "other", name))

  def test_scope_that_is_part_of_a_function_name(self):
    def read_and_write(slot):
      t = testing.write_slot(slot, 1.0)  # in no scope
      with jax.named_scope("write"):
        return testing.write_slot(t, 2.0)

    c = compiled(read_and_write, jnp.int32(0))
    self.assertLen(testing.OrderAnalysis(c).select("write"), 1)
    for selector in ("read", "read_and", "read_and_write"):
      with self.assertRaisesRegex(ValueError, "matches no op"):
        testing.OrderAnalysis(c).select(selector)

  def test_bad_selector_arguments(self):
    c = compile_hazard(Ordering.NONE)
    with self.assertRaisesRegex(TypeError, r"among=\['read'\]"):
      testing.races(c, "read")
    with self.assertRaisesRegex(ValueError, "must not be empty"):
      testing.happens_before(c, "", "read")
    with self.assertRaisesRegex(TypeError, "must be a str"):
      testing.happens_before(c, cast(Any, 3), "read")


class LibraryKernelsTest(absltest.TestCase):
  def test_default_races_skip_jax_library_kernels(self):
    def fn(slot, a, b):
      t = testing.write_slot(slot, 1.0)
      x = testing.read_slot(t)
      s = jnp.linalg.solve(a, b)  # LAPACK custom calls on CPU
      testing.write_slot(t, s[0])
      return x, jnp.linalg.solve(a, 2 * b)

    c = compiled(fn, jnp.int32(0), jnp.eye(3), jnp.ones(3))
    analysis = testing.OrderAnalysis(c)
    text = testing.module_text(c)
    lapack = sorted(set(re.findall(r'custom_call_target="(lapack_\w+)"', text)))
    self.assertNotEmpty(lapack)  # the kernels are there...
    found = testing.races(c)
    targets = {op.target for race in found for op in (race.first, race.second)}
    self.assertEqual(targets, {READ, WRITE})  # ...but not in the default
    # The one real hazard: the read is not ordered before the second write.
    self.assertLen(found, 1)
    self.assertEqual(
      {found[0].first.target, found[0].second.target}, {READ, WRITE}
    )
    # Named explicitly, library kernels are still selectable.
    self.assertNotEmpty(analysis.select(lapack[0]))


def branchy_program(use_switch):
  """A write, then lax.switch (3 branches) or lax.cond (branches a and c).

  Branch a reads and writes unordered; branch b writes; branch c reads. A
  write after the conditional uses the token from before it.
  """

  def branch_a(t):
    with jax.named_scope("a_read"):
      x = testing.read_slot(t)
    with jax.named_scope("a_write"):
      t = testing.write_slot(t, 2.0)
    return t, x

  def branch_b(t):
    with jax.named_scope("b_write"):
      return testing.write_slot(t, 3.0), jnp.float32(0)

  def branch_c(t):
    with jax.named_scope("c_read"):
      return t, testing.read_slot(t)

  def fn(slot, index):
    token = testing.write_slot(slot, 1.0)
    if use_switch:
      out = jax.lax.switch(index, [branch_a, branch_b, branch_c], token)
    else:
      out = jax.lax.cond(index == 0, branch_a, branch_c, token)
    with jax.named_scope("after_write"):
      late = testing.write_slot(token, 4.0)
    return out, late

  return fn


class ExclusiveBranchesTest(parameterized.TestCase):
  @parameterized.parameters(True, False)
  def test_ops_of_different_branches_do_not_race(self, use_switch):
    c = compiled(branchy_program(use_switch), jnp.int32(0), jnp.int32(1))
    self.assertIn(" conditional(", testing.module_text(c))
    analysis = testing.OrderAnalysis(c)
    scopes = ["a_read", "a_write", "c_read", "after_write"]
    if use_switch:
      scopes.insert(2, "b_write")
    name = {scope: analysis.select(scope)[0] for scope in scopes}
    # Controls: two unordered calls of one branch race, and so does each
    # branch's call with the write after the conditional.
    expected = {frozenset((name["a_read"], name["a_write"]))}
    expected |= {
      frozenset((name[scope], name["after_write"]))
      for scope in scopes
      if scope != "after_write"
    }
    self.assertEqual({frozenset(r) for r in analysis.races(scopes)}, expected)
    self.assertEqual({frozenset(r) for r in testing.races(c)}, expected)
    # Calls of different branches are exclusive: neither ordered nor racing.
    for a, b in [("a_read", "c_read"), ("a_write", "c_read")] + (
      [("a_write", "b_write"), ("b_write", "c_read")] if use_switch else []
    ):
      self.assertEqual(analysis.races([a, b]), [])
      self.assertFalse(analysis.happens_before(a, b))
      self.assertFalse(analysis.happens_before(b, a))

  def test_batched_cond_runs_both_branches(self):
    # Under vmap with a batched predicate, cond becomes a select: both
    # branches run, so their calls race; unbatched, they are exclusive.
    fn = test_util.write_then_branch
    among = ["then_write", "else_read"]
    single = compiled(fn, jnp.int32(0), jnp.bool_(True))
    self.assertIn(" conditional(", testing.module_text(single))
    self.assertEqual(testing.races(single, among), [])
    batched = compiled(
      jax.vmap(fn, in_axes=(None, 0)), jnp.int32(0), jnp.array([True, False])
    )
    self.assertNotIn(" conditional(", testing.module_text(batched))
    self.assertLen(testing.races(batched, among), 1)


class AssertHappensBeforeTest(absltest.TestCase):
  def test_failure_names_target_scope_line_and_fix(self):
    c = compile_hazard(Ordering.NONE)
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(c, "read", "second_write")
    message = str(raised.exception)
    self.assertIn("'read' does not happen before 'second_write'", message)
    # jax < 0.7 adds a jit(main) component.
    self.assertRegex(message, rf"{READ} scope 'jit\(hazard\)/.*read/")
    self.assertRegex(message, rf"{WRITE} scope 'jit\(hazard\)/.*second_write/")
    self.assertRegex(message, r"entangle_jax/_\w+\.py:\d+ \(%")
    self.assertIn("entangle(token, x)", message)

  def test_passes_when_ordered(self):
    testing.assert_happens_before(
      compile_hazard(Ordering.ENTANGLE), "read", "second_write"
    )

  def test_location_is_the_users_line(self):
    def fn(slot):
      t = testing.write_slot(slot, 1.0)
      x = testing.read_slot(t)  # the line the message must point at
      testing.write_slot(t, 2.0)
      return x

    c = compiled(fn, jnp.int32(0))
    (race,) = testing.races(c)
    line = fn.__code__.co_firstlineno + 2
    location = race.first.location
    assert location is not None
    if test_util.records_full_stack():
      self.assertGreater(len(race.first.instruction.stack), 1)
      expected = f"{THIS_FILE}:{line}"
    else:  # Older jax records only the innermost frame: the wrapper's.
      self.assertLen(race.first.instruction.stack, 1)
      expected = f"_example_resource.py:{race.first.instruction.stack[0][1]}"
    self.assertEqual(location.split(os.sep)[-1], expected)
    rendered = testing.format_races(testing.races(c))
    self.assertIn(expected, rendered)
    self.assertIn("1 pair of ops not ordered", rendered)
    self.assertEqual(testing.format_races([]), "Every pair of ops is ordered.")

  def test_zero_size_witness_is_explained(self):
    def fn(slot, empty):
      t = testing.write_slot(slot, 1.0)
      with jax.named_scope("read"):
        x = testing.read_slot(t)
      witness = x[None][:0] if empty else x
      t = entangle(t, witness)  # the line the note must point at
      with jax.named_scope("write"):
        testing.write_slot(t, 2.0)
      return x

    empty = compiled(lambda s: fn(s, empty=True), jnp.int32(0))
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(empty, "read", "write")
    message = str(raised.exception)
    self.assertIn("1 entangle call here only has zero-size witnesses", message)
    (op,) = testing.OrderAnalysis(empty).empty_witness_entangles()
    self.assertEqual(op.target, "entangle_jax_entangle")
    self.assertIn(f"  {op.label()}", message.splitlines())
    if len(op.instruction.stack) > 1:
      line = fn.__code__.co_firstlineno + 5
      self.assertIn(f"{THIS_FILE}:{line} ", message)
    # Controls: a witness with elements orders, and a failure with no
    # empty witness says nothing about them.
    testing.assert_happens_before(
      compiled(lambda s: fn(s, empty=False), jnp.int32(0)), "read", "write"
    )
    with self.assertRaises(AssertionError) as raised:
      testing.assert_happens_before(
        compile_hazard(Ordering.NONE), "read", "second_write"
      )
    self.assertNotIn("zero-size", str(raised.exception))


# A while loop fed by a fusion, a side-effecting op ordered only by a control
# predecessor, and one ordered by nothing.
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
HloModule branches

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
HloModule async

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

# Data that flows only through one element of a tuple, and a zero-sized value.
TUPLE_HLO = """
HloModule tuples

ENTRY %main (a: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %x = s32[] custom-call(%a), custom_call_target="x", custom_call_has_side_effect=true
  %y = s32[] custom-call(%a), custom_call_target="y", custom_call_has_side_effect=true
  %t = (s32[], s32[]) tuple(%x, %y)
  %g = s32[] get-tuple-element(%t), index=1
  %uses_y = s32[] custom-call(%g), custom_call_target="uses_y"
  %empty = s32[0] custom-call(%a), custom_call_target="empty", custom_call_has_side_effect=true
  ROOT %uses_empty = s32[] custom-call(%empty), custom_call_target="uses_empty"
}
"""


# Entangle calls: one with a zero-size witness only; one aliasing operands 0
# and 2 (two payloads) with witnesses of either size.
ENTANGLE_HLO = """
HloModule entangles

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
HloModule loop

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
HloModule exclusive

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


class HandWrittenHloTest(parameterized.TestCase):
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

  def test_loop_element_read_inside_orders(self):
    # Control: once the body reads element 1, its producer precedes the loop.
    reads_both = LOOP_HLO.replace(
      '%r = s32[] custom-call(%i), custom_call_target="inside"',
      '%r = s32[] custom-call(%i, %c), custom_call_target="inside"',
    )
    self.assertTrue(testing.happens_before(reads_both, "carried", "inside"))
    self.assertFalse(testing.happens_before(LOOP_HLO, "carried", "inside"))

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

  def test_only_the_tuple_element_read_counts(self):
    self.assertTrue(testing.happens_before(TUPLE_HLO, "y", "uses_y"))
    self.assertFalse(testing.happens_before(TUPLE_HLO, "x", "uses_y"))

  def test_zero_sized_values_order_nothing(self):
    self.assertFalse(testing.happens_before(TUPLE_HLO, "empty", "uses_empty"))

  def test_entangles_with_only_zero_size_witnesses(self):
    analysis = testing.OrderAnalysis(ENTANGLE_HLO)
    entangles = analysis.empty_witness_entangles()
    self.assertEqual([op.name for op in entangles], ["only_empty"])
    parsed = _hlo_parse.parse(ENTANGLE_HLO)
    by_name = {i.name: i for i in parsed.computations["main"]}
    self.assertEqual(by_name["only_empty"].aliased_operands, (0,))
    self.assertEqual(by_name["mixed"].aliased_operands, (0, 2))
    # Control: the same call with a witness of one element is not listed.
    one = ENTANGLE_HLO.replace("%e = f32[0]", "%e = f32[1]").replace(
      "(a: s32[], e: f32[0]", "(a: s32[], e: f32[1]"
    )
    self.assertEqual(testing.OrderAnalysis(one).empty_witness_entangles(), [])

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

  def test_selector_matching_nothing(self):
    with self.assertRaisesRegex(ValueError, r"Custom-call targets: \['after'"):
      testing.happens_before(NESTED_HLO, "missing", "read")

  def test_text_without_entry_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "ENTRY"):
      testing.races("HloModule empty\n")

  def test_merged_op_names(self):
    # XLA's CSE merges equal ops and joins their op_names as "(x:y)".
    text = NESTED_HLO.replace(
      'custom_call_target="free"',
      'custom_call_target="free", '
      'metadata={op_name="jit(f)/(a/sum:b (1)/sum)/tail"}',
    )
    analysis = testing.OrderAnalysis(text)
    for scope in ("a", "b (1)", "tail", "a/sum/tail"):
      self.assertEqual(analysis.select(scope), ["free"], scope)
    with self.assertRaisesRegex(ValueError, "matches no op"):
      analysis.select("sum:b")

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
