"""The registry of `in_program_order`'s ordering rules (issue 52, item 2):
one module per family, `eval_eqn` a lookup in it, and the list of what is
supported generated from it onto docs/fixing_races.md."""

import dataclasses

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import in_program_order, testing
from entangle_jax._src.program_order import call_like, rule_inputs
from entangle_jax._src.program_order.interpreter import Context
from entangle_jax._src.program_order.rules import registry
from entangle_jax._src.targets import sources
from tools import rule_docs


class RegistryTest(absltest.TestCase):
  def test_each_family_has_its_module_and_primitives(self):
    found = {f.name: (f.module, p) for f, p in registry.supported()}
    self.assertEqual(list(found), list(registry.ORDER))
    self.assertEqual(found["loops"], ("loops", ("scan", "while")))
    self.assertEqual(found["conditionals"], ("conditionals", ("cond",)))
    self.assertIn("custom_vjp_call", found["custom derivatives"][1])
    self.assertIn("custom_jvp_call", found["custom derivatives"][1])
    self.assertIn("checkpoint", found["checkpoint"][1])
    self.assertIn("shard_map", found["maps and sharding"][1])
    self.assertIn("pjit", found["maps and sharding"][1])
    self.assertIn("entangle", found["first order"][1])

  def test_only_first_order_rules_apply_everywhere(self):
    for name, rule in registry.RULES.items():
      self.assertEqual(
        rule.higher_order, rule.family.name != "first order", name
      )

  def test_the_call_like_primitives_are_one_list(self):
    """The rules that inline nested calls and checkpoints are registered
    for `call_like`'s names, the list `dependence` reads (it had its own,
    without ``remat2``)."""
    inlined = {
      name
      for name, rule in registry.RULES.items()
      if rule.family.module in ("maps", "checkpoint") and name != "shard_map"
    }
    self.assertEqual(inlined, set(call_like.INLINED))
    self.assertIn("remat2", call_like.INLINED)

  def test_a_primitive_is_registered_once(self):
    with self.assertRaisesRegex(ValueError, "two ordering rules"):
      registry.register(registry.FAMILIES["loops"], ("scan",))(
        lambda *a: rule_inputs.RuleResult(list(a))
      )

  def test_eval_eqn_applies_the_registered_rule(self):
    jaxpr = jax.make_jaxpr(lambda x: jnp.reshape(x, (2, 2)))(jnp.ones(4))
    (eqn,) = jaxpr.eqns
    seen = []
    rule = registry.RULES["reshape"]

    def spy(ctx, e, invals):
      seen.append(e.primitive.name)
      return rule.apply(ctx, e, invals)

    registry.RULES["reshape"] = registry.OrderingRule(
      "reshape", rule.family, spy, higher_order=False
    )
    try:
      ctx = Context(sources.current())
      (out,) = ctx.eval_eqn(eqn, [jnp.ones(4)])
    finally:
      registry.RULES["reshape"] = rule
    self.assertEqual(seen, ["reshape"])
    self.assertEqual(out.shape, (2, 2))

  def test_each_host_callback_has_its_carrier_rule(self):
    """How a host callback takes a carrier is a rule per primitive
    (`rules.host_callbacks`), in a table of its own: none of them is an
    ordering rule, and only an io_callback is given a result."""
    found = {
      name: rule.bind.__module__.rsplit(".", 1)[-1]
      for name, rule in registry.CARRIERS.items()
    }
    self.assertEqual(
      found,
      {
        "io_callback": "host_callbacks",
        "debug_callback": "host_callbacks",
        "debug_print": "host_callbacks",
      },
    )
    self.assertEqual(set(found) & set(registry.RULES), set())
    self.assertIsNotNone(registry.CARRIERS["debug_print"].unordered)
    with self.assertRaisesRegex(ValueError, "two carrier rules"):
      registry.register_carrier(("io_callback",), takes_operand=bool)(
        lambda *a: []
      )

  def test_native_binds_a_carrier_by_the_primitives_rule(self):
    """A debug callback with no operand, after a write, is bound by its
    primitive's carrier rule with one operand more; the control, one with
    an operand of its own, is bound as it is."""

    def program(operand):
      def f(x):
        testing.write_slot(3, x)
        if operand:
          jax.debug.callback(lambda *a: None, x + 1.0)
        else:
          jax.debug.callback(lambda *a: None)
        return x

      return f

    rule = registry.CARRIERS["debug_callback"]
    seen = []

    def spy(eqn, invals, adds_operand, adds_result):
      seen.append((len(invals), adds_operand, adds_result))
      return rule.bind(eqn, invals, adds_operand, adds_result)

    registry.CARRIERS["debug_callback"] = dataclasses.replace(rule, bind=spy)
    try:
      jax.jit(in_program_order(program(False))).lower(jnp.float32(1.0))
      self.assertEqual(seen, [(1, True, False)])
      del seen[:]
      jax.jit(in_program_order(program(True))).lower(jnp.float32(1.0))
      self.assertEqual(seen, [])
    finally:
      registry.CARRIERS["debug_callback"] = rule

  def test_a_program_without_native_calls_is_unchanged(self):
    f = in_program_order(
      lambda x: jax.lax.scan(lambda c, y: (c + y, c), 0.0, x)
    )
    carry, ys = f(jnp.arange(3.0))
    self.assertEqual(float(carry), 3.0)
    self.assertEqual(ys.tolist(), [0.0, 0.0, 1.0])

  def test_the_page_shows_the_registry(self):
    page = rule_docs.PAGES["supported primitives"]
    if not page.is_file():
      self.skipTest("the docs are not in this tree")
    self.assertEqual(
      rule_docs.block_text(page.read_text(), "supported primitives"),
      registry.markdown(),
      f"run {rule_docs.COMMAND} to rewrite the page's table",
    )


if __name__ == "__main__":
  absltest.main()
