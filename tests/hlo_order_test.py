"""happens_before / races on compiled modules and on hand-written HLO."""

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import _hazard, entangle, testing
from entangle_jax._hazard import Ordering
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)

WRITE = "entangle_jax_write_slot"
READ = "entangle_jax_read_slot"


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


class CompiledHazardTest(parameterized.TestCase):
  def test_no_ordering_races(self):
    compiled = compile_hazard(Ordering.NONE)
    analysis = testing.OrderAnalysis(compiled)
    self.assertFalse(testing.happens_before(compiled, "read", "second_write"))
    self.assertTrue(testing.happens_before(compiled, "first_write", "read"))
    (read,) = analysis.select(READ)
    (second,) = analysis.select("second_write")
    self.assertEqual(analysis.races([READ, WRITE]), [(read, second)])

  def test_optimization_barrier_does_not_order_on_cpu(self):
    compiled = compile_hazard(Ordering.OPTIMIZATION_BARRIER)
    self.assertFalse(testing.happens_before(compiled, "read", "second_write"))
    self.assertLen(testing.races(compiled, [READ, WRITE]), 1)

  def test_entangle_orders(self):
    compiled = compile_hazard(Ordering.ENTANGLE)
    self.assertTrue(testing.happens_before(compiled, "read", "second_write"))
    self.assertTrue(testing.happens_before(compiled, READ, "second_write"))
    self.assertEqual(testing.races(compiled, [READ, WRITE]), [])
    self.assertFalse(testing.happens_before(compiled, "second_write", "read"))

  def test_accepts_hlo_text(self):
    text = testing.module_text(compile_hazard(Ordering.ENTANGLE))
    self.assertTrue(testing.happens_before(text, "read", "second_write"))

  @parameterized.parameters((Ordering.NONE, False), (Ordering.ENTANGLE, True))
  def test_inside_scan_body(self, ordering, ordered):
    def loop(token, y):
      def body(carry, _):
        return hazard_step(*carry, ordering), None

      return jax.lax.scan(body, (token, y), None, length=5)[0]

    compiled = jax.jit(loop).lower(jnp.int32(0), jnp.float32(1)).compile()
    self.assertIn(" while(", testing.module_text(compiled))
    self.assertEqual(
      testing.happens_before(compiled, "read", "second_write"), ordered
    )

  @parameterized.parameters((Ordering.NONE, False), (Ordering.ENTANGLE, True))
  def test_under_vmap(self, ordering, ordered):
    fn = jax.vmap(lambda t, y: hazard_step(t, y, ordering))
    compiled = (
      jax.jit(fn).lower(jnp.arange(3, dtype=jnp.int32), jnp.ones(3)).compile()
    )
    self.assertEqual(
      testing.happens_before(compiled, "read", "second_write"), ordered
    )

  @parameterized.parameters((Ordering.NONE, False), (Ordering.ENTANGLE, True))
  def test_under_grad(self, ordering, ordered):
    def loss(y):
      _, y = hazard_step(jnp.int32(0), y, ordering)
      return jnp.sum(y)

    compiled = jax.jit(jax.grad(loss)).lower(jnp.ones(3)).compile()
    self.assertEqual(
      testing.happens_before(compiled, "read", "second_write"), ordered
    )

  def test_several_payload_leaves(self):
    def fn(token, a, b):
      with jax.named_scope("read"):
        x = testing.read_slot(token)
      token, a, b = entangle((token, a, b), x)
      with jax.named_scope("use_a"):
        a = testing.write_slot(a, jnp.float32(0))
      with jax.named_scope("use_b"):
        b = testing.write_slot(b, jnp.float32(0))
      return token, a, b

    compiled = (
      jax.jit(fn).lower(jnp.int32(0), jnp.int32(1), jnp.int32(2)).compile()
    )
    self.assertTrue(testing.happens_before(compiled, "read", "use_a"))
    self.assertTrue(testing.happens_before(compiled, "read", "use_b"))
    self.assertFalse(testing.happens_before(compiled, "use_a", "use_b"))

  def test_unknown_selector_lists_what_exists(self):
    compiled = compile_hazard(Ordering.ENTANGLE)
    with self.assertRaisesRegex(
      ValueError, r"'nothing'.*entangle_jax_read_slot.*second_write"
    ):
      testing.happens_before(compiled, "nothing", "read")


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


class HandWrittenHloTest(parameterized.TestCase):
  @parameterized.parameters(
    ("first", "read", True),
    ("prepare", "read", True),  # fusion -> tuple -> while containing read
    ("prepare", "write", True),
    ("read", "after", True),  # only through control-predecessors
    ("write", "after", True),
    ("read", "write", False),  # unordered within the loop body
    ("write", "read", False),
    ("read", "first", False),
    ("cond", "write", False),  # condition and body of one while
    ("free", "after", False),
    ("first", "free", False),
  )
  def test_nested(self, before, after, expected):
    self.assertEqual(
      testing.happens_before(NESTED_HLO, before, after), expected
    )

  def test_default_races_are_side_effecting_calls(self):
    self.assertCountEqual(
      testing.races(NESTED_HLO),
      [("w", "free"), ("first", "free"), ("after", "free")],
    )

  def test_races_among_selected(self):
    self.assertEqual(testing.races(NESTED_HLO, ["read", "write"]), [("r", "w")])

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


if __name__ == "__main__":
  absltest.main()
