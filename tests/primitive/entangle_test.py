"""The entangle function: values, trees, dtypes, lowering and errors."""

import functools
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl.testing import absltest, parameterized
from jax import export

import entangle_jax
from entangle_jax import entangle
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax._src.primitive import MAX_LEAVES_PER_CALL
from entangle_jax.testing import happens_before, read_slot, write_slot
from tests.test_util import (
  assert_same_tree,
  copies,
  custom_calls,
  hlo_text,
  identity,
  lowered_text,
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
    text = lowered_text(lambda x: entangle(x), jnp.ones(3))
    self.assertNotIn(ENTANGLE_TARGET, text)
    # A leafless witness beside one with arrays is passed by: the arrays
    # order the result.
    text = lowered_text(lambda x, w: entangle(x, (), w), jnp.ones(3), 1.0)
    self.assertIn(ENTANGLE_TARGET, text)


class LoweringTest(parameterized.TestCase):
  def test_one_custom_call_for_three_leaves_and_four_witnesses(self):
    payload = (jnp.ones(3), jnp.ones((2, 2)), jnp.int32(1))
    witnesses = (jnp.ones(1), jnp.ones(2), jnp.int8(3), jnp.ones((4, 1)))

    def fn(p, w):
      return entangle(p, *w)

    self.assertEqual(
      custom_calls(hlo_text(fn, payload, witnesses), ENTANGLE_TARGET), 1
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
      custom_calls(hlo_text(fn, jnp.ones(3), 1.0), ENTANGLE_TARGET), 0
    )

  def test_tpu_lowers_to_the_pallas_kernel(self):
    # tests/primitive/tpu_kernel_test.py checks the kernel and its fallback.
    fn = jax.jit(lambda x, w: entangle(x, w))
    exported = export.export(fn, platforms=["tpu"])(
      jax.ShapeDtypeStruct((3,), jnp.float32),
      jax.ShapeDtypeStruct((), jnp.float32),
    )
    text = exported.mlir_module()
    self.assertIn("tpu_custom_call", text)
    self.assertNotIn("stablehlo.optimization_barrier", text)
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
    text = hlo_text(lambda p, w: entangle(p, w), leaves(count), 1.0)
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


class _Leafless:
  """A handle wrapper whose pytree has no leaves."""


jax.tree_util.register_pytree_node(
  _Leafless, lambda x: ((), None), lambda _, __: _Leafless()
)


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

  def test_payload_is_checked_without_witnesses(self):
    self.assertIs(entangle(payload := [jnp.ones(2)]), payload)
    with self.assertRaisesRegex(TypeError, r"payload\['h'\] .* got str"):
      entangle({"h": "handle"})

  @parameterized.named_parameters(
    ("none", None, "NoneType"),
    ("empty_tuple", (), "tuple"),
    ("list_of_none", [None], "list"),
    ("empty_dict", {}, "dict"),
    ("leafless_pytree", None, "_Leafless"),
  )
  def test_witnesses_without_array_leaves_are_named(self, witness, kind):
    # What jax.debug.callback returns (None), or a handle wrapper with no
    # leaves, would order nothing after it without a word.
    if kind == "_Leafless":
      witness = _Leafless()
    for call in (entangle, lambda p, *w: jax.jit(entangle)(p, *w)):
      with self.assertRaisesRegex(
        TypeError, rf"the witnesses \({kind} .*\) have no array leaves"
      ):
        call(jnp.ones(2), witness)
      with self.assertRaisesRegex(TypeError, "have no array leaves"):
        call(jnp.ones(2), witness, {})
    # Control: an array beside it orders the result.
    self.assertEqual(entangle(jnp.ones(2), witness, jnp.ones(1)).shape, (2,))

  @parameterized.named_parameters(
    ("none", None, "NoneType"),
    ("empty_dict", {}, "dict"),
    ("empty_tuple", (), "tuple"),
    ("nested_empty", {"a": [], "b": ()}, "dict"),
    ("leafless_pytree", None, "_Leafless"),
  )
  def test_a_payload_without_array_leaves_is_named(self, payload, kind):
    # A handle wrapper registered as a pytree of no leaves (klujax's
    # KLUNumeric is one) would come back unchanged and order nothing.
    if kind == "_Leafless":
      payload = _Leafless()
    for witnesses in ((jnp.ones(2),), ()):
      with self.assertRaisesRegex(
        TypeError, rf"the payload, {kind} .*has no array leaves"
      ):
        entangle(payload, *witnesses)
    # Control: one array leaf is enough.
    self.assertEqual(entangle([jnp.ones(2)], 1.0)[0].shape, (2,))

  def test_error_also_under_jit(self):
    with self.assertRaisesRegex(TypeError, r"witnesses\[0\]"):
      jax.jit(lambda x: entangle(x, "nope"))(1.0)


if __name__ == "__main__":
  absltest.main()
