"""Guards the private JAX API that sharded lowering depends on.

Each test fails when the symbol disappears or stops meaning what
entangle_jax/_src/partitioning.py relies on (each reached through
entangle_jax/_src/jax_compat.py).
"""

import inspect

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.experimental import jet
from jax.interpreters import mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from entangle_jax import entangle
from entangle_jax._src import (
  jax_compat,
  lowering,
  native,
  partitioning,
  primitive,
)
from tests import test_util


class PrivateApiTest(absltest.TestCase):
  def test_registered_partitioner_is_called_for_the_target(self):
    # xla_client.register_custom_call_partitioner: XLA calls the partitioner
    # registered for a custom call's target while partitioning. Our
    # partitioner asks `lowering.shard_program` for the per-device program, so a
    # sharded compile with a shape never seen before must add a miss.
    # Positional order and the c_api keyword, as register_partitioner passes
    # them (a nanobind function: its signature is the docstring's first line).
    signature = jax_compat.register_custom_call_partitioner.__doc__
    self.assertRegex(
      signature.splitlines()[0],
      r"^register_custom_call_partitioner\(name: str, prop_user_sharding: "
      r"object, partition: object, infer_sharding_from_operands: object, "
      r".*c_api: ",
    )
    mesh = jax.make_mesh((8,), ("x",))
    payload = jax.device_put(jnp.ones(8 * 11), NamedSharding(mesh, P("x")))
    before = lowering.shard_program.cache_info().misses
    jax.jit(lambda p: entangle(p, p * 2)).lower(payload).compile()
    self.assertEqual(lowering.shard_program.cache_info().misses, before + 1)

  def test_shard_program_is_the_plain_call_on_local_shapes(self):
    text = lowering.shard_program(
      (((11,), jnp.dtype("float32")), ((), jnp.dtype("int32"))), 1
    )
    self.assertIn(f"@{native.ENTANGLE_TARGET}(", text)
    self.assertIn("(tensor<11xf32>, tensor<i32>) -> tensor<11xf32>", text)
    self.assertIn("output_operand_aliases", text)

  def test_plugin_callbacks_take_one_callback(self):
    # xla_bridge.register_plugin_callbacks(callback) calls `callback(c_api)`
    # for every PJRT plugin backend, now or once plugins are discovered. Here
    # backends exist already, so it runs at once: with a C API capsule for a
    # plugin (GPU), with nothing on a CPU-only install.
    params = list(
      inspect.signature(jax_compat.register_plugin_callbacks).parameters
    )
    self.assertEqual(params, ["callback"])
    seen = []
    jax_compat.register_plugin_callbacks(seen.append)
    plugins = [b for b in jax.devices() if b.platform not in ("cpu", "tpu")]
    if plugins:
      self.assertNotEqual(seen, [])
    for c_api in seen:
      self.assertEqual(type(c_api).__name__, "PyCapsule")

  def test_tuple_shardings_for_several_payload_leaves(self):
    # jax_compat.HloSharding.tuple_sharding: a call with several payload
    # leaves has a tuple result, whose sharding the partitioner builds with
    # it. Each leaf must come back with its own sharding and value.
    mesh = jax.make_mesh((8,), ("x",))
    rows = NamedSharding(mesh, P("x"))
    a = jax.device_put(jnp.arange(8 * 3.0), rows)
    b = jax.device_put(jnp.arange(8 * 5, dtype=jnp.int32), rows)
    before = lowering.shard_program.cache_info().misses
    out_a, out_b = jax.jit(lambda a, b: entangle((a, b), a * 2))(a, b)
    self.assertEqual(lowering.shard_program.cache_info().misses, before + 1)
    self.assertTrue(out_a.sharding.is_equivalent_to(rows, 1))
    self.assertTrue(out_b.sharding.is_equivalent_to(rows, 1))
    self.assertTrue((out_a == a).all() and (out_b == b).all())
    self.assertTrue(callable(jax_compat.HloSharding.tuple_sharding))

  def test_jet_rule_table_holds_entangles_rule(self):
    # jax_compat.jet_rules is jax.experimental.jet's rule table: jet looks
    # the primitive up there (tests/primitive/entangle_transforms_test.py
    # runs it).
    self.assertIs(jax_compat.jet_rules, jet.jet_rules)
    self.assertIn(primitive.entangle_p, jax_compat.jet_rules)

  def test_bind_equation_evaluates_each_equation_again(self):
    # Primitive.get_bind_params: (subfuns, params) up to jax 0.7, params
    # with a "subfuns" key later; jax_compat.bind_equation binds either.
    # A custom_vjp call has subfuns (fun, fwd, bwd); scan has none.
    @jax.custom_vjp
    def double(x):
      return x * 2

    double.defvjp(lambda x: (x * 2, None), lambda _, ct: (ct * 3,))

    def f(x):
      return jax.lax.scan(lambda c, _: (double(c), None), x, None, length=2)[0]

    closed = jax.make_jaxpr(f)(1.0)
    (scan,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "scan"]
    inner = scan.params["jaxpr"].jaxpr.eqns
    (call,) = [e for e in inner if e.primitive.name == "custom_vjp_call"]
    self.assertLen(jax_compat.equation_subfuns(call), 3)
    self.assertEqual(jax_compat.equation_subfuns(scan), [])
    self.assertEqual(jax_compat.bind_equation(call, [2.0]), [4.0])
    # The rules survive re-binding: the backward pass is the user's.
    grad = jax.grad(lambda x: jax_compat.bind_equation(call, [x])[0])(1.0)
    self.assertEqual(grad, 3.0)

  def test_equation_context_keeps_scopes_and_source_lines(self):
    # source_info_util.user_context(traceback, name_stack=...): what is
    # bound inside takes the equation's named scope and Python stack.
    def f(x):
      with jax.named_scope("kept_scope"):
        return jnp.sin(x)

    (eqn,) = jax.make_jaxpr(f)(1.0).jaxpr.eqns

    def again(x):
      with jax_compat.equation_context(eqn):
        return jax_compat.bind_equation(eqn, [x])[0]

    text = jax.jit(again).lower(1.0).as_text(debug_info=True)
    self.assertIn("kept_scope", text)
    self.assertIn("test_equation_context_keeps_scopes_and_source_lines", text)
    self.assertNotIn('<locals>.again"', text)

  def test_call_site_is_each_equations_own_python_lines(self):
    # eqn.source_info.traceback.frames, each with file_name and line_num:
    # in_program_order tells a checkpoint's recomputed call from another
    # call of one target on one handle by these (value_table.saved_for).
    # Where JAX stops keeping them, call_site gives () and both sites below
    # would be one.
    def f(x):
      a = jnp.sin(x)
      b = jnp.sin(x)
      return a + b

    first, second, _ = jax.make_jaxpr(f)(1.0).jaxpr.eqns
    here = jax_compat.call_site(first)
    self.assertTrue(here, "JAX kept no Python lines for the equation")
    self.assertTrue(
      any(name.endswith("private_api_test.py") for name, _ in here), here
    )
    self.assertNotEqual(here, jax_compat.call_site(second))

  def test_current_name_stack_is_the_scopes_in_effect(self):
    # source_info_util.current_name_stack(): str() joins the scopes by "/".
    with jax.named_scope("outer"), jax.named_scope("entangle_jax:read:r"):
      self.assertEqual(
        jax_compat.current_name_stack(), "outer/entangle_jax:read:r"
      )

  def test_pallas_tpu_info_is_what_the_tpu_kernel_asks(self):
    # jax_compat.pallas_tpu_rank1_needs_rows imports Pallas's private
    # tpu_info and calls get_tpu_info: present from jax 0.10 (0.10.2 and
    # 0.12.0.1 have it), absent in 0.6.2; without a TPU attached the call
    # fails, so vectors go into entangle's TPU kernel as rows.
    try:
      from jax._src.pallas.mosaic import tpu_info
    except ImportError:
      self.assertLess(test_util.jax_version(), (0, 10))
      self.assertFalse(jax_compat.pallas_tpu_rank1_needs_rows())
      return
    self.assertTrue(callable(tpu_info.get_tpu_info))
    if jax.devices()[0].platform != "tpu":
      self.assertTrue(jax_compat.pallas_tpu_rank1_needs_rows())

  def test_token_types_are_what_jax_gives_a_token(self):
    # AbstractToken and Token (jax.extend.core, or jax.core on jax 0.6):
    # an eager token is a Token, a traced one's aval an AbstractToken, and
    # neither is an array; a token lowers to !stablehlo.token.
    token = jax.lax.create_token()
    self.assertIsInstance(token, jax_compat.Token)
    self.assertTrue(jax_compat.is_token(token))
    self.assertTrue(jax_compat.is_token_aval(jax.typeof(token)))
    (var,) = jax.make_jaxpr(jax.lax.create_token)().jaxpr.outvars
    self.assertTrue(jax_compat.is_token_aval(var.aval))
    seen = []

    def f(x):
      t = jax.lax.create_token()
      seen.append((jax_compat.is_token(t), jax_compat.is_token(x)))
      return entangle(x, t)

    text = jax.jit(f).lower(jnp.ones(2)).as_text()
    self.assertEqual(seen, [(True, False)])
    self.assertIn("!stablehlo.token", text)
    for value in (jnp.ones(2), 1.0, None):
      self.assertFalse(jax_compat.is_token(value))
    self.assertFalse(jax_compat.is_token_aval(jax.typeof(jnp.ones(2))))

  def test_ordered_effects_are_the_ones_jax_threads_a_token_through(self):
    # effects.ordered_effects / lowerable_effects: registries of effect
    # types with add_type and contains; io_callback(ordered=True) has an
    # ordered effect, ordered=False none, and an ordered effect's equation
    # gets a token in its lowering (the main function takes one).
    from jax.experimental import io_callback

    def f(x, ordered):
      shape = jax.ShapeDtypeStruct((), jnp.float32)
      return io_callback(lambda v: v, shape, x, ordered=ordered)

    for ordered in (True, False):
      (eqn,) = jax.make_jaxpr(lambda x, o=ordered: f(x, o))(1.0).eqns
      self.assertEqual(bool(jax_compat.ordered_effects_of(eqn)), ordered)
    (effect,) = jax_compat.ordered_effects_of(
      jax.make_jaxpr(lambda x: f(x, True))(1.0).eqns[0]
    )
    self.assertTrue(jax_compat.ordered_effects.contains(effect))
    self.assertIsInstance(effect, jax_compat.Effect)
    self.assertTrue(jax_compat.lowerable_effects.contains(effect))
    for registry in (jax_compat.ordered_effects, jax_compat.lowerable_effects):
      self.assertTrue(callable(registry.add_type))
    text = jax.jit(lambda x: f(x, True)).lower(1.0).as_text()
    self.assertIn("!stablehlo.token", text)

  def test_scan_counts_reads_this_jaxs_scan_parameters(self):
    # Two constants, two carries, one xs: whichever way this jax writes a
    # scan's parameters, the counts come out the same.
    def f(k, m, xs):
      def body(c, y):
        return (c[0] + y * k, c[1] * m), c[0]

      return jax.lax.scan(body, (0.0, 1.0), xs)

    (eqn,) = [
      e
      for e in jax.make_jaxpr(f)(2.0, 3.0, jnp.ones(3)).eqns
      if e.primitive.name == "scan"
    ]
    self.assertEqual(jax_compat.scan_counts(eqn.params), (2, 2))

  def test_varying_axes_reads_this_jaxs_types(self):
    # A value's type says over which manual axes of a shard_map it varies
    # (``vma`` before jax 0.10, ``manual_axis_type.varying`` since): a
    # split input varies over its axis, a constant over none, and
    # make_varying adds the axis. Where neither field is read, every value
    # would seem to vary over none.
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    seen = {}

    def body(s):
      constant = jnp.zeros(s.shape, s.dtype)
      seen["split"] = jax_compat.varying_axes(s)
      seen["constant"] = jax_compat.varying_axes(constant)
      made = jax_compat.make_varying(constant, frozenset({"x"}))
      seen["made"] = jax_compat.varying_axes(made)
      return s

    jax.make_jaxpr(
      jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    )(jnp.arange(2.0))
    self.assertEqual(
      seen,
      {"split": {"x"}, "constant": frozenset(), "made": {"x"}},
    )
    self.assertEqual(jax_compat.varying_axes(jnp.ones(2)), frozenset())

  def test_sharding_rule_text_is_shardys(self):
    # The rule is built as Shardy's text form; parsing and printing it back
    # must give the same text, factor names included (i..z, then z_1, ...).
    shapes = [(2,) * 20, (), (3, 4)]
    text = partitioning.sharding_rule(shapes, num_payload=2)
    with mlir.make_ir_context():
      self.assertEqual(str(mlir.ir.Attribute.parse(text)), text)
    self.assertIn("z_2", text)

  def test_sharding_rule_mirrors_each_payload(self):
    self.assertEqual(
      partitioning.sharding_rule([(4, 5), (), (6,)], num_payload=2),
      "#sdy.op_sharding_rule<([i, j], [], [k])->([i, j], []) "
      "{i=4, j=5, k=6}, custom>",
    )


if __name__ == "__main__":
  absltest.main()
