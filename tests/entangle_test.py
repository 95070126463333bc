"""The entangle function: values, trees, dtypes and transformations."""

import functools
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl.testing import absltest, parameterized
from jax import export
from jax.experimental import jet

import entangle_jax
from entangle_jax import entangle
from entangle_jax._native_loader import ENTANGLE_TARGET
from entangle_jax._primitive import MAX_LEAVES_PER_CALL
from entangle_jax.testing import (
  happens_before,
  module_text,
  read_slot,
  write_slot,
)
from tests.test_util import (
  NUM_CPU_DEVICES,
  assert_same_tree,
  copies,
  custom_calls,
  hlo_text,
)

# Every array dtype JAX has (64-bit ones become 32-bit without jax_enable_x64).
DTYPES = [
  np.bool_,
  ml_dtypes.int2,
  ml_dtypes.uint2,
  ml_dtypes.int4,
  ml_dtypes.uint4,
  np.int8,
  np.uint8,
  np.int16,
  np.uint16,
  np.int32,
  np.uint32,
  np.int64,
  np.uint64,
  ml_dtypes.bfloat16,
  np.float16,
  np.float32,
  np.float64,
  np.complex64,
  np.complex128,
  ml_dtypes.float8_e4m3fn,
  ml_dtypes.float8_e5m2,
  ml_dtypes.float8_e4m3b11fnuz,
  ml_dtypes.float8_e4m3fnuz,
  ml_dtypes.float8_e5m2fnuz,
  ml_dtypes.float8_e3m4,
  ml_dtypes.float8_e4m3,
  ml_dtypes.float8_e8m0fnu,
  ml_dtypes.float4_e2m1fn,
]


def lowered_text(fn, *args) -> str:
  return jax.jit(fn).lower(*args).as_text()


def compiled_text(fn, *args) -> str:
  return hlo_text(fn, *args)


def assert_bitwise_equal(test, actual, expected):
  actual, expected = np.asarray(actual), np.asarray(expected)
  test.assertEqual(actual.dtype, expected.dtype)
  test.assertEqual(actual.shape, expected.shape)
  test.assertEqual(actual.tobytes(), expected.tobytes())


class ValuesTest(parameterized.TestCase):
  @parameterized.named_parameters(
    (np.dtype(dtype).name, dtype) for dtype in DTYPES
  )
  def test_every_dtype_round_trips_bit_exactly(self, dtype):
    bits = np.arange(12, dtype=np.uint8).reshape(3, 4)
    values = jnp.asarray(bits.astype(dtype))
    witness = jnp.ones(2)
    eager = entangle(values, witness)
    jitted = jax.jit(entangle)(values, witness)
    as_witness = jax.jit(entangle)(witness, values)
    assert_bitwise_equal(self, eager, values)
    assert_bitwise_equal(self, jitted, values)
    assert_bitwise_equal(self, as_witness, witness)

  def test_nan_payloads_and_negative_zero_survive(self):
    bits = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000], np.uint32)
    payload = jnp.asarray(bits.view(np.float32))
    out = jax.jit(entangle)(payload, 1.0)
    self.assertEqual(np.asarray(out).view(np.uint32).tolist(), bits.tolist())

  @parameterized.parameters((0,), ((0, 3),), ((2, 0, 5),))
  def test_zero_size_arrays(self, shape):
    payload = jnp.zeros(shape, jnp.float32)
    out = jax.jit(entangle)(payload, jnp.zeros(shape))
    self.assertEqual(out.shape, payload.shape)

  def test_scalars_keep_weak_types(self):
    out = jax.jit(entangle)(1.0, jnp.ones(2))
    self.assertTrue(out.weak_type)
    self.assertEqual(out.dtype, jnp.float32)
    strong = entangle(jnp.float32(1.0), 2)
    self.assertFalse(strong.weak_type)
    self.assertEqual(jnp.asarray(entangle(3, 1.0)).dtype, jnp.int32)

  def test_pytrees_keep_their_structure(self):
    payload = {"a": 1, "b": (jnp.arange(3.0), np.float32(2)), "c": [True]}
    out = jax.jit(entangle)(payload, 3, [jnp.ones(2), {"w": 4}])
    assert_same_tree(self, out, payload, np.array_equal)

  def test_typed_prng_keys(self):
    key = jax.random.key(7)
    keys = jax.random.split(key, 3)
    out = jax.jit(entangle)((key, keys), jnp.ones(2))
    self.assertEqual(out[0].dtype, key.dtype)
    np.testing.assert_array_equal(
      jax.random.key_data(out[1]), jax.random.key_data(keys)
    )
    as_witness = jax.jit(entangle)(jnp.ones(2), key)
    np.testing.assert_array_equal(as_witness, jnp.ones(2))
    # The key stays usable after entangling.
    self.assertEqual(jax.random.normal(out[0], (2,)).shape, (2,))

  def test_no_witnesses_returns_payload_itself(self):
    payload = {"x": jnp.ones(3)}
    self.assertIs(entangle(payload), payload)
    self.assertIs(entangle(payload, (), {}, [None]), payload)
    text = lowered_text(lambda x: entangle(x, ()), jnp.ones(3))
    self.assertNotIn(ENTANGLE_TARGET, text)


class LoweringTest(parameterized.TestCase):
  def test_one_custom_call_for_three_leaves_and_four_witnesses(self):
    payload = (jnp.ones(3), jnp.ones((2, 2)), jnp.int32(1))
    witnesses = (jnp.ones(1), jnp.ones(2), jnp.int8(3), jnp.ones((4, 1)))

    def fn(p, w):
      return entangle(p, *w)

    self.assertEqual(
      custom_calls(compiled_text(fn, payload, witnesses), ENTANGLE_TARGET), 1
    )

  def test_payload_operands_alias_results(self):
    text = lowered_text(
      lambda a, b, w: entangle((a, b), w), jnp.ones(3), jnp.ones(2), 1.0
    )
    self.assertIn("output_operand_aliases", text)
    self.assertEqual(text.count("stablehlo.output_operand_alias<"), 2)

  def test_not_side_effecting(self):
    text = lowered_text(lambda x, w: entangle(x, w), jnp.ones(3), 1.0)
    self.assertNotIn("has_side_effect = true", text)

  def test_unused_result_is_removed(self):
    def fn(x, w):
      entangle(x, w)
      return x

    self.assertEqual(
      custom_calls(compiled_text(fn, jnp.ones(3), 1.0), ENTANGLE_TARGET), 0
    )

  def test_tpu_lowers_to_optimization_barrier(self):
    fn = jax.jit(lambda x, w: entangle(x, w))
    exported = export.export(fn, platforms=["tpu"])(
      jax.ShapeDtypeStruct((3,), jnp.float32),
      jax.ShapeDtypeStruct((), jnp.float32),
    )
    text = exported.mlir_module()
    self.assertIn("stablehlo.optimization_barrier", text)
    self.assertNotIn(ENTANGLE_TARGET, text)

  def test_version_is_exposed(self):
    self.assertRegex(entangle_jax.__version__, r"^\d+\.\d+\.\d+")


def leaves(count: int) -> list[jax.Array]:
  return [jnp.full(2, i, jnp.float32) for i in range(count)]


class ManyLeavesTest(parameterized.TestCase):
  """Above MAX_LEAVES_PER_CALL payload leaves, one call per chunk of them.

  (One call aliasing thousands of leaves compiles for tens of seconds; see
  MAX_LEAVES_PER_CALL. Compile time is measured by benchmarks, not tests.)
  """

  @parameterized.parameters(
    (1, 1), (MAX_LEAVES_PER_CALL, 1), (MAX_LEAVES_PER_CALL + 1, 2), (300, 3)
  )
  def test_calls_per_payload_size(self, count, calls):
    text = compiled_text(lambda p, w: entangle(p, w), leaves(count), 1.0)
    self.assertEqual(custom_calls(text, ENTANGLE_TARGET), calls)
    calls_found = re.findall(
      r"custom-call\(([^)]*)\), "
      rf'custom_call_target="{ENTANGLE_TARGET}".*'
      r"output_to_operand_aliasing=\{(.*?)\}, ",
      text,
    )
    self.assertLen(calls_found, calls)
    aliased = [aliases.count("}: (") for _, aliases in calls_found]
    self.assertEqual(sum(aliased), count)
    self.assertLessEqual(max(aliased), MAX_LEAVES_PER_CALL)
    for (operands, _), payload_leaves in zip(calls_found, aliased, strict=True):
      # Every call takes the witness besides its aliased payload leaves.
      self.assertLen(operands.split(", "), payload_leaves + 1)

  def test_every_chunk_is_ordered_after_the_witness(self):
    count = 2 * MAX_LEAVES_PER_CALL + 5

    def fn(ent, slot, payload):
      with jax.named_scope("witness"):
        w = read_slot(slot)
      out = ent(payload, w)
      other_slot = slot + 1
      with jax.named_scope("first"):
        write_slot(slot, out[0][0])
      with jax.named_scope("last"):
        write_slot(other_slot, out[-1][0])
      return out, w

    for ent, ordered in ((entangle, True), (identity, False)):
      compiled = (
        jax.jit(functools.partial(fn, ent))
        .lower(jnp.int32(0), leaves(count))
        .compile()
      )
      self.assertEqual(happens_before(compiled, "witness", "first"), ordered)
      self.assertEqual(happens_before(compiled, "witness", "last"), ordered)

  def test_chunks_add_no_copy(self):
    payload = leaves(2 * MAX_LEAVES_PER_CALL + 5)
    self.assertEqual(
      copies(lambda p, w: entangle(p, w), payload, 1.0, donate_argnums=0), 0
    )
    # The control: without donation every leaf is copied.
    self.assertEqual(
      copies(lambda p, w: entangle(p, w), payload, 1.0), len(payload)
    )

  def test_values_and_order_of_leaves_survive(self):
    payload = {"a": leaves(MAX_LEAVES_PER_CALL + 3), "b": jnp.int32(7)}
    out = jax.jit(entangle)(payload, jnp.ones(2))
    assert_same_tree(self, out, payload, np.array_equal)


class TransformationsTest(parameterized.TestCase):
  def test_vmap_is_one_call_on_batched_operands(self):
    def fn(p, w):
      return jax.vmap(entangle, in_axes=(1, None), out_axes=1)(p, w)

    payload, witness = jnp.arange(12.0).reshape(3, 4), jnp.ones(2)
    np.testing.assert_array_equal(jax.jit(fn)(payload, witness), payload)
    text = compiled_text(fn, payload, witness)
    self.assertEqual(custom_calls(text, ENTANGLE_TARGET), 1)
    self.assertNotIn(" while(", text)

  def test_vmap_leaves_unbatched_leaves_unbatched(self):
    def fn(a, b, w):
      return jax.vmap(lambda a, w: entangle((a, b), w))(a, w)

    args = (jnp.ones((4, 2)), jnp.float32(3), jnp.ones((4, 5)))
    (eqn,) = [
      e
      for e in jax.make_jaxpr(fn)(*args).eqns
      if e.primitive.name == "entangle"
    ]
    self.assertEqual([v.aval.shape for v in eqn.invars], [(4, 2), (), (4, 5)])
    out = fn(*args)
    np.testing.assert_array_equal(out[1], jnp.full(4, 3.0))

  def test_grad_is_identity_for_payload_and_zero_for_witness(self):
    def loss(x, w):
      return jnp.sum(jnp.sin(entangle(x, w)))

    x, w = jnp.arange(3.0), jnp.arange(2.0)
    gx, gw = jax.grad(loss, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, jnp.cos(x))
    np.testing.assert_array_equal(gw, jnp.zeros(2))

  def test_jvp_vjp_and_linearize(self):
    x, w = jnp.arange(3.0), jnp.ones(2)
    primal, tangent = jax.jvp(entangle, (x, w), (2 * x, w))
    np.testing.assert_array_equal(primal, x)
    np.testing.assert_array_equal(tangent, 2 * x)
    _, vjp = jax.vjp(entangle, x, w)
    ct_x, ct_w = vjp(jnp.full(3, 5.0))
    np.testing.assert_array_equal(ct_x, jnp.full(3, 5.0))
    np.testing.assert_array_equal(ct_w, jnp.zeros(2))
    _, linear = jax.linearize(lambda x: entangle(x, w), x)
    np.testing.assert_array_equal(linear(x), x)

  def test_jvp_entangles_the_tangent_with_the_witnesses(self):
    text = lowered_text(
      lambda x, t, w: jax.jvp(lambda x: entangle(x, w), (x,), (t,)),
      jnp.ones(3),
      jnp.ones(3),
      jnp.ones(2),
    )
    self.assertEqual(text.count(f"@{ENTANGLE_TARGET}"), 2)

  def test_integer_payload_under_grad(self):
    def loss(x, n):
      x, n = entangle((x, n), x)
      return jnp.sum(x) * n

    np.testing.assert_array_equal(
      jax.grad(loss)(jnp.ones(3), jnp.int32(2)), jnp.full(3, 2.0)
    )

  def test_checkpoint(self):
    w = jnp.ones(2)

    def fn(x):
      return jnp.sum(jax.checkpoint(lambda x: jnp.sin(entangle(x, w)))(x))

    x = jnp.arange(3.0)
    np.testing.assert_allclose(jax.jit(jax.grad(fn))(x), jnp.cos(x))

  def test_inside_scan_while_and_cond(self):
    def body(carry, _):
      carry = entangle(carry, carry * 2)
      return carry + 1, carry

    final, history = jax.jit(lambda: jax.lax.scan(body, 0.0, None, length=4))()
    self.assertEqual(float(final), 4.0)
    np.testing.assert_array_equal(history, jnp.arange(4.0))
    loop = jax.jit(
      lambda: jax.lax.while_loop(
        lambda c: c < 5, lambda c: entangle(c, c) + 1, 0
      )
    )
    self.assertEqual(int(loop()), 5)
    branch = jax.jit(
      lambda p: jax.lax.cond(p, lambda x: entangle(x, 1.0), lambda x: -x, 2.0)
    )
    self.assertEqual(float(branch(True)), 2.0)
    self.assertEqual(float(branch(False)), -2.0)


def identity(payload, *witnesses):
  """The control for structure tests: entangle's values, none of its order."""
  del witnesses
  return payload


# Each applies `ent` (entangle, or the identity control) to payload `x` with
# witness `w` through a transformation, and returns an array to consume.
TRANSFORMED = {
  "plain": lambda ent, x, w: ent(x, w),
  "vmap": lambda ent, x, w: jax.vmap(ent, in_axes=(0, None))(x[None], w)[0],
  "grad": lambda ent, x, w: jax.grad(lambda x: jnp.sum(jnp.sin(ent(x, w))))(x),
  "jvp_tangent": lambda ent, x, w: jax.jvp(lambda x: ent(x, w), (x,), (x,))[1],
  "vjp_primal": lambda ent, x, w: jax.vjp(lambda x: ent(x, w), x)[0],
  "linearize": lambda ent, x, w: jax.linearize(lambda x: ent(x, w), x)[1](x),
  "checkpoint": lambda ent, x, w: jax.grad(
    lambda x: jnp.sum(jax.checkpoint(lambda x: jnp.sin(ent(x, w)))(x))
  )(x),
  "jet": lambda ent, x, w: sum(
    jet.jet(lambda x: ent(x, w), (x,), ((x, 3 * x),))[1]
  ),
  "scan": lambda ent, x, w: jax.lax.scan(
    lambda c, _: (ent(c, w) + 1, None), x, None, length=3
  )[0],
  "while_loop": lambda ent, x, w: jax.lax.while_loop(
    lambda c: c[0] < 5, lambda c: ent(c, w) + 1, x
  ),
  "cond": lambda ent, x, w: jax.lax.cond(
    x[0] > 0, lambda x: ent(x, w), lambda x: -x, x
  ),
}


def probe(transformed, ent):
  """A native read is the witness; a native write consumes the result."""

  def fn(slot, x):
    with jax.named_scope("witness"):
      w = read_slot(slot)
    y = transformed(ent, x, w)
    with jax.named_scope("consumer"):
      write_slot(slot, jnp.sum(y))
    return y, w  # Returning `w` keeps the read in the control too.

  return fn


class StructureTest(parameterized.TestCase):
  """Under every transformation: one custom call, and the order it makes.

  Values alone cannot tell entangle from the identity; the control shows
  that the identity gives neither the call nor the order.
  """

  @parameterized.named_parameters(TRANSFORMED.items())
  def test_one_call_orders_the_consumer_after_the_witness(self, transformed):
    args = (jnp.int32(0), jnp.arange(1.0, 4.0))
    compiled = jax.jit(probe(transformed, entangle)).lower(*args).compile()
    self.assertEqual(custom_calls(module_text(compiled), ENTANGLE_TARGET), 1)
    self.assertTrue(happens_before(compiled, "witness", "consumer"))
    control = jax.jit(probe(transformed, identity)).lower(*args).compile()
    self.assertEqual(custom_calls(module_text(control), ENTANGLE_TARGET), 0)
    self.assertFalse(happens_before(control, "witness", "consumer"))

  def test_jvp_keeps_one_call_each_for_primal_and_tangent(self):
    def fn(slot, x):
      with jax.named_scope("witness"):
        w = read_slot(slot)
      primal, tangent = jax.jvp(lambda x: entangle(x, w), (x,), (2 * x,))
      with jax.named_scope("consumer"):
        write_slot(slot, jnp.sum(tangent))
      return primal

    compiled = jax.jit(fn).lower(jnp.int32(0), jnp.ones(3)).compile()
    self.assertEqual(custom_calls(module_text(compiled), ENTANGLE_TARGET), 2)
    self.assertTrue(happens_before(compiled, "witness", "consumer"))

  def test_jet_passes_the_series_through(self):
    x, w = jnp.arange(3.0), jnp.ones(2)
    terms = (x, 3 * x, -x)
    primal, series = jet.jet(lambda x: entangle(x, w), (x,), (terms,))
    np.testing.assert_array_equal(primal, x)
    for got, want in zip(series, terms, strict=True):
      np.testing.assert_array_equal(got, want)


class EagerTest(parameterized.TestCase):
  def test_under_disable_jit(self):
    payload = {"a": jnp.arange(3.0), "k": jax.random.key(1), "n": 4}
    with jax.disable_jit():
      out = entangle(payload, jnp.ones(2), 5.0)
      self.assertIsInstance(out["a"], jax.Array)
    np.testing.assert_array_equal(out["a"], payload["a"])
    np.testing.assert_array_equal(
      jax.random.key_data(out["k"]), jax.random.key_data(payload["k"])
    )
    self.assertEqual(int(out["n"]), 4)

  def test_under_disable_jit_inside_vmap_and_grad(self):
    with jax.disable_jit():
      batched = jax.vmap(entangle, in_axes=(0, None))(jnp.ones((2, 3)), 1.0)
      grad = jax.grad(lambda x: jnp.sum(entangle(x, 1.0) ** 2))(jnp.ones(3))
    np.testing.assert_array_equal(batched, jnp.ones((2, 3)))
    np.testing.assert_array_equal(grad, jnp.full(3, 2.0))

  def test_leaves_committed_to_different_devices_are_named(self):
    self.assertEqual(jax.device_count(), NUM_CPU_DEVICES)
    zero, one = jax.devices()[:2]
    payload = {"x": jax.device_put(jnp.ones(3), zero)}
    witness = [jax.device_put(jnp.ones(2), one)]
    with self.assertRaisesRegex(
      ValueError,
      r"^entangle: payload\['x'\] is committed to \[.*\] but "
      r"witnesses\[1\]\[0\] to \[.*\]\..*jax\.device_put",
    ) as raised:
      entangle(payload, 1.0, witness)
    self.assertIn(str(zero), str(raised.exception))
    self.assertIn(str(one), str(raised.exception))

  def test_devices_in_another_order_name_entangle(self):
    # Same devices, other order: JAX's own check catches it; the message
    # must still name entangle rather than an internal function.
    devices = np.array(jax.devices())
    meshes = [
      jax.sharding.Mesh(order, ("x",)) for order in (devices, devices[::-1])
    ]
    x, w = (
      jax.device_put(
        jnp.arange(8.0),
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")),
      )
      for mesh in meshes
    )
    with self.assertRaisesRegex(ValueError, r"operands\[1\] of entangle "):
      entangle(x, w)

  def test_same_device_and_uncommitted_leaves_are_fine(self):
    one = jax.devices()[1]
    payload = jax.device_put(jnp.arange(3.0), one)
    out = entangle(payload, jax.device_put(2.0, one), jnp.ones(2), np.ones(1))
    self.assertEqual(out.devices(), {one})
    np.testing.assert_array_equal(out, jnp.arange(3.0))


class ErrorsTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("payload_string", ({"a": [1, "s"]}, 1.0), r"payload\['a'\]\[1\]"),
    ("witness_object", (1.0, 2.0, {"q": object()}), r"witnesses\[1\]\['q'\]"),
    ("payload_none_leaf_free", ([object()], 1.0), r"payload\[0\]"),
    ("payload_int_too_large", ({"big": 2**70}, 1.0), r"payload\['big'\]"),
    ("witness_int_too_large", (1.0, [-(2**64)]), r"witnesses\[0\]\[0\]"),
    ("string_array", ((np.array(["a"]),), 1.0), r"payload\[0\]"),
    ("object_array", (1.0, np.array([None])), r"witnesses\[0\]"),
    ("numpy_str", ({"s": np.str_("hi")}, 1.0), r"payload\['s'\]"),
    ("bytes_scalar", (1.0, 2.0, np.bytes_(b"a")), r"witnesses\[1\]"),
    (
      "datetime64",
      (1.0, {"t": np.datetime64("2026-11-29")}),
      r"witnesses\[0\]\['t'\]",
    ),
    (
      "datetime64_array",
      ([np.array(["2026-11-29"], "datetime64[D]")], 1.0),
      r"payload\[0\]",
    ),
    ("timedelta64", (1.0, np.timedelta64(3, "s")), r"witnesses\[0\]"),
  )
  def test_non_array_leaf_raises_type_error_naming_its_path(self, args, path):
    with self.assertRaisesRegex(TypeError, path):
      entangle(*args)

  def test_error_also_under_jit(self):
    with self.assertRaisesRegex(TypeError, r"witnesses\[0\]"):
      jax.jit(lambda x: entangle(x, "nope"))(1.0)


if __name__ == "__main__":
  absltest.main()
