"""happens_before / races on compiled modules: the demo's hazard under
scan, vmap, grad and cond, and exclusive branches."""

from typing import Any, cast

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import entangle, testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from tests import test_util  # sets up 8 CPU devices
from tests.test_util import ORDERED, READ, WRITE, compiled, hazard_step


class CompiledHazardTest(parameterized.TestCase):
  def test_no_ordering_races(self):
    c = _hazard.compiled(Ordering.NONE)
    analysis = testing.OrderAnalysis(c)
    self.assertFalse(testing.happens_before(c, "read", "second_write"))
    self.assertTrue(testing.happens_before(c, "first_write", "read"))
    (read,) = analysis.select(READ)
    (second,) = analysis.select("second_write")
    self.assertEqual(analysis.races([READ, WRITE]), [(read, second)])

  @ORDERED
  def test_default_races_find_the_demo_hazard(self, ordering, ordered):
    # read_slot is neither side-effecting nor aliasing: it must be looked at.
    c = _hazard.compiled(ordering)
    analysis = testing.OrderAnalysis(c)
    (read,) = analysis.select("read")
    (second,) = analysis.select("second_write")
    expected = [] if ordered else [{read, second}]
    self.assertEqual([set(race) for race in testing.races(c)], expected)

  def test_optimization_barrier_does_not_order_on_cpu(self):
    c = _hazard.compiled(Ordering.OPTIMIZATION_BARRIER)
    self.assertFalse(testing.happens_before(c, "read", "second_write"))
    self.assertLen(testing.races(c, [READ, WRITE]), 1)

  def test_entangle_orders(self):
    c = _hazard.compiled(Ordering.ENTANGLE)
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
    # Each public function names itself and the argument.
    fn = cast(Any, fn)
    calls = {
      "happens_before": lambda: testing.happens_before(fn, "a", "b"),
      "assert_happens_before": lambda: testing.assert_happens_before(
        fn, "a", "b"
      ),
      "races": lambda: testing.races(fn),
      "order_graph": lambda: testing.order_graph(fn),
      "module_text": lambda: testing.module_text(fn),
      "OrderAnalysis": lambda: testing.OrderAnalysis(fn),
    }
    for name, call in calls.items():
      with (
        self.subTest(name),
        self.assertRaisesRegex(
          TypeError, rf"^{name}: compiled must be a jax.stages.Compiled"
        ),
      ):
        call()
    with self.assertRaisesRegex(
      TypeError, r"^format_races: races must be a list of Race.*not int"
    ):
      testing.format_races(cast(Any, 3))

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
    c = _hazard.compiled(Ordering.ENTANGLE)
    with self.assertRaisesRegex(
      ValueError, r"'nothing'.*entangle_jax_read_slot.*second_write"
    ):
      testing.happens_before(c, "nothing", "read")


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


class OpArgumentsTest(absltest.TestCase):
  """`OrderAnalysis` questions about ops take the analysis's own `Op`s."""

  def setUp(self):
    super().setUp()
    self.text = testing.module_text(_hazard.compiled(Ordering.ENTANGLE))
    self.ordered = testing.OrderAnalysis(self.text)
    self.unordered = testing.OrderAnalysis(_hazard.compiled(Ordering.NONE))

  def ops(self, analysis):
    (read,), (write,) = map(analysis.select_ops, ("read", "second_write"))
    return read, write

  def test_a_selector_string_is_not_an_op(self):
    for ask in ("precedes", "exclusive", "sequenced", "conflict", "is_race"):
      with (
        self.subTest(ask),
        self.assertRaisesRegex(TypeError, r"expected an Op .*got str: 'read'"),
      ):
        getattr(self.ordered, ask)("read", "second_write")

  def test_an_op_of_another_module_is_refused(self):
    read, write = self.ops(self.ordered)
    # With jax 0.10.2 both modules name these calls alike (main.2, ffi_call.4
    # and ffi_call.5; jax 0.6.2 numbers them apart); each analysis must
    # answer only for its own, however its ops are named.
    self.assertTrue(self.ordered.precedes(read, write))
    self.assertFalse(self.unordered.precedes(*self.ops(self.unordered)))
    with self.assertRaisesRegex(ValueError, "is not an op of this module"):
      self.unordered.precedes(read, write)
    with self.assertRaisesRegex(ValueError, "is not an op of this module"):
      self.unordered.is_race(read, write)

  def test_ops_of_another_analysis_of_the_same_module_are_accepted(self):
    # A copy of the text, parsed anew rather than taken from the cache.
    again = testing.OrderAnalysis(self.text + "\n")
    self.assertTrue(again.precedes(*self.ops(self.ordered)))


if __name__ == "__main__":
  absltest.main()
