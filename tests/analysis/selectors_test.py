"""Selectors: named scopes and targets, and which ops they pick; JAX's and
XLA's library kernels are not the user's native calls."""

import re
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import entangle, testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from tests.test_util import ORDERED, READ, WRITE, compiled


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
    c = _hazard.compiled(Ordering.NONE)
    with self.assertRaisesRegex(TypeError, r"among=\['read'\]"):
      testing.races(c, "read")
    with self.assertRaisesRegex(ValueError, "must not be empty"):
      testing.happens_before(c, "", "read")
    with self.assertRaisesRegex(TypeError, "must be a str"):
      testing.happens_before(c, cast(Any, 3), "read")

  def test_a_scope_of_only_pure_ops_says_to_pass_all_ops(self):
    def fn(slot):
      with jax.named_scope("write"):
        t = testing.write_slot(slot, 1.0)
      with jax.named_scope("pure"):
        x = jax.pure_callback(
          lambda t: np.float32(1.0), jax.ShapeDtypeStruct((), jnp.float32), t
        )
      return entangle(t, x)

    c = compiled(fn, jnp.int32(0))
    self.assertLen(testing.OrderAnalysis(c).select("write"), 1)  # control
    with self.assertRaisesRegex(
      ValueError,
      r"'pure' matches no op.* The scope holds only ops that are not "
      r"effectful \(\['xla_ffi_python_cpu_callback'\]\): pass all_ops=True",
    ):
      testing.OrderAnalysis(c).select("pure")
    self.assertLen(testing.OrderAnalysis(c, all_ops=True).select("pure"), 1)
    with self.assertRaises(ValueError) as raised:
      testing.OrderAnalysis(c).select("elsewhere")
    self.assertNotIn("all_ops", str(raised.exception))

  def test_predicates_take_an_op_or_its_instruction(self):
    def fn(slot, a):
      with jax.named_scope("write"):
        t = testing.write_slot(slot, 1.0)
      with jax.named_scope("solve"):
        s = jnp.linalg.solve(a, a)  # a LAPACK call: no native call of yours
      return entangle(t, s)

    analysis = testing.OrderAnalysis(
      compiled(fn, jnp.int32(0), jnp.eye(2)), all_ops=True
    )
    (write,) = analysis.select_ops("write")
    ops = analysis.select_ops("solve")  # LAPACK and arithmetic
    for predicate in (testing.is_user_native_call, testing.is_effectful):
      with self.subTest(predicate.__name__):
        self.assertTrue(predicate(write))
        self.assertTrue(predicate(write.instruction))
        self.assertFalse(any(predicate(op) for op in ops))
        with self.assertRaisesRegex(
          TypeError, rf"{predicate.__name__}: expected an Op .*got str"
        ):
          predicate(cast(Any, "write"))


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


if __name__ == "__main__":
  absltest.main()
