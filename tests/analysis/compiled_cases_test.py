"""Compiled programs on which the analysis once answered wrong, each with a
control that gives the opposite answer: host callbacks, loop conditions and
predicates, scopes with parentheses, merged and deleted calls, Mermaid
directives."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback

from entangle_jax import Resource, entangle, testing
from tests.graph_reading import read_mermaid
from tests.test_util import READ, compiled

F32 = jax.ShapeDtypeStruct((), jnp.float32)


def host(v):
  return np.float32(v)


class HostCallbackTest(absltest.TestCase):
  def program(self, chained):
    def fn(x):
      a = io_callback(host, F32, x, ordered=False)
      b = io_callback(host, F32, (a if chained else x) + 1, ordered=False)
      jax.debug.callback(lambda v: None, b)
      p = jax.pure_callback(host, F32, x)
      q = jax.pure_callback(host, F32, x + 2)
      return a + b + p + q

    return compiled(fn, jnp.float32(1))

  def test_unordered_io_callbacks_race(self):
    c = self.program(chained=False)
    found = testing.races(c)
    kinds = [
      sorted(op.scope.rsplit("/", 1)[1] for op in (race.first, race.second))
      for race in found
    ]
    # The two io_callbacks, and the debug callback (after the second) with
    # the first; the pure_callbacks are never looked at.
    self.assertCountEqual(
      kinds,
      [["io_callback", "io_callback"], ["debug_callback", "io_callback"]],
    )

  def test_chained_io_callbacks_do_not_race(self):
    # Control: the second callback consumes the first one's result.
    self.assertEqual(testing.races(self.program(chained=True)), [])

  def test_pure_callbacks_are_not_selected(self):
    analysis = testing.OrderAnalysis(self.program(chained=False))
    selected = {
      op.scope.rsplit("/", 1)[1] for op in analysis.user_native_calls()
    }
    self.assertEqual(selected, {"io_callback", "debug_callback"})
    # Named explicitly, by target, every callback is there.
    target = analysis.user_native_calls()[0].target
    assert target is not None
    self.assertLen(analysis.select_ops(target), 5)


class LoopTest(absltest.TestCase):
  def test_condition_and_body_do_not_race(self):
    def until_converged(slot, in_body):
      def cond(s):
        return (s[1] < 3.0) if in_body else (testing.read_slot(s[0]) < 3.0)

      def body(s):
        t = testing.write_slot(s[0], s[1])
        extra = testing.read_slot(s[0]) if in_body else 0.0
        return t, s[1] + 1 + extra

      return jax.lax.while_loop(cond, body, (slot, jnp.float32(0)))

    c = compiled(lambda s: until_converged(s, False), jnp.int32(0))
    self.assertEqual(testing.races(c), [])
    # Control: the same query in the body races with the body's write.
    c = compiled(lambda s: until_converged(s, True), jnp.int32(0))
    self.assertLen(testing.races(c), 1)

  def test_a_bare_predicate_orders_its_producer(self):
    def fn(slot, from_read):
      with jax.named_scope("read"):
        done = testing.read_slot(slot) > 0
      start = done if from_read else jnp.bool_(True)

      def body(s):
        with jax.named_scope("body_write"):
          t = testing.write_slot(s[0], 1.0)
        return t, s[2] > 5, s[2] + 1

      out = jax.lax.while_loop(lambda s: s[1], body, (slot, start, 0))
      return out, done

    c = compiled(lambda s: fn(s, True), jnp.int32(0))
    self.assertTrue(testing.happens_before(c, "read", "body_write"))
    # Control: the predicate does not start from the read.
    c = compiled(lambda s: fn(s, False), jnp.int32(0))
    self.assertFalse(testing.happens_before(c, "read", "body_write"))


class ScopeNameTest(absltest.TestCase):
  def test_whole_components_with_parentheses_and_colons(self):
    def fn(slot):
      with jax.named_scope("decode(step)"):
        z = testing.read_slot(slot + 2)  # ordered before nothing
      t = testing.write_slot(slot, 1.0)
      with jax.named_scope("step"):
        x = testing.read_slot(t)
      t = entangle(t, x)
      with jax.named_scope("after"):
        testing.write_slot(t, 2.0)
      with jax.named_scope("(a:b)"):
        y = testing.read_slot(slot + 1)
      return x, y, z

    analysis = testing.OrderAnalysis(compiled(fn, jnp.int32(0)))
    self.assertTrue(analysis.happens_before("step", "after"))
    self.assertLen(analysis.select("(a:b)"), 1)
    with self.assertRaisesRegex(ValueError, "matches no op"):
      analysis.select("a")
    # Control: "decode(step)" is selectable too, and is not ordered before
    # "after": had "step" picked it, the answer would have been False.
    self.assertFalse(analysis.happens_before("decode(step)", "after"))


class MergedCallsTest(absltest.TestCase):
  def test_merged_reads_keep_one_scope(self):
    def fn(slot, other):
      with jax.named_scope("r1"):
        a = testing.read_slot(slot)
      with jax.named_scope("r2"):
        b = testing.read_slot(other)
      return a, b

    analysis = testing.OrderAnalysis(compiled(lambda s: fn(s, s), 0))
    (merged,) = analysis.select_ops(READ)  # XLA merged the equal reads
    kept = "r1" if "/r1/" in merged.scope else "r2"
    self.assertEqual(analysis.select(kept), [merged.name])
    gone = "r2" if kept == "r1" else "r1"
    with self.assertRaisesRegex(ValueError, "merges identical ones"):
      analysis.select(gone)
    # Control: with different operands both reads, and scopes, are there.
    analysis = testing.OrderAnalysis(compiled(lambda s: fn(s, s + 1), 0))
    self.assertLen(analysis.select_ops(READ), 2)
    self.assertLen(analysis.select("r1") + analysis.select("r2"), 2)


class DeletedCallsTest(absltest.TestCase):
  def test_a_read_that_holds_no_bytes_is_gone_and_the_error_says_why(self):
    def fn(token):
      res = Resource(token, name="z")
      with jax.named_scope("rd"):
        x = res.read(testing.read_slot)
      with jax.named_scope("wr"):
        res.write(testing.write_slot, jnp.zeros(token.shape, jnp.float32))
      return x, res.token

    analysis = testing.OrderAnalysis(compiled(fn, jnp.zeros((0,), jnp.int32)))
    with self.assertRaisesRegex(ValueError, "result holds no bytes"):
      analysis.select("rd")
    self.assertLen(analysis.select("wr"), 1)
    self.assertEqual(analysis.races(), [])
    # Control: on a token that holds bytes, the read is there.
    analysis = testing.OrderAnalysis(compiled(fn, jnp.zeros((1,), jnp.int32)))
    self.assertLen(analysis.select("rd"), 1)
    self.assertTrue(analysis.happens_before("rd", "wr"))


class MermaidLabelTest(absltest.TestCase):
  def test_a_directive_in_a_scope_is_shown_not_applied(self):
    scope = "%%{init: {'theme':'forest'}}%% \"q\" {x}\nnext"

    def fn(slot):
      with jax.named_scope(scope):
        return testing.read_slot(slot)

    c = compiled(fn, jnp.int32(0))
    text = testing.order_graph(c, format="mermaid")
    (label,) = read_mermaid(self, text)[0].values()  # no %% left in `text`
    self.assertIn(f"/{scope}/ffi_call", label)
    # Control: the scope itself does hold what Mermaid would obey.
    self.assertIn(
      "%%{init", testing.OrderAnalysis(c).select_ops(scope)[0].scope
    )


if __name__ == "__main__":
  absltest.main()
