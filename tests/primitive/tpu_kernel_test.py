"""entangle's TPU lowering, checked without a TPU: lowered for TPU here.

On TPU `entangle` lowers to a Pallas TPU kernel that does nothing, a Mosaic
custom call (``tpu_custom_call``) that XLA:TPU cannot see into: it takes the
payload and every witness, and its results alias the payload. Operands go in
as their `tpu_kernel.carrier` says (scalar payloads padded, other dtypes as
the same bits); where none has one, the call falls back to
``optimization_barrier``, which XLA:TPU removes before scheduling
(docs/platforms.md, "TPU", has what the TPU did with each).
"""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl.testing import absltest, parameterized
from jax import export

from entangle_jax import entangle
from entangle_jax._src import jax_compat, tpu_kernel
from entangle_jax._src.native import ENTANGLE_TARGET

F32 = jnp.float32


def tpu_text(fn, *specs) -> str:
  """The StableHLO of jit(fn) exported for TPU, on this (CPU) machine."""
  return export.export(jax.jit(fn), platforms=["tpu"])(*specs).mlir_module()


def kernel_calls(text: str) -> list[str]:
  """The lines of the Mosaic custom calls in `text`."""
  return [
    line
    for line in text.splitlines()
    if "stablehlo.custom_call @tpu_custom_call(" in line
  ]


def through_reshapes(text: str, value: str) -> str:
  """The value that `value` reshapes (a bitcast), through any chain."""
  while found := re.search(
    rf"{re.escape(value)} = stablehlo.reshape (%\S+) ", text
  ):
    value = found.group(1)
  return value


def match(pattern: str, text: str) -> re.Match[str]:
  found = re.search(pattern, text)
  assert found, f"{pattern!r} not in the module"
  return found


def spec(shape, dtype=F32):
  return jax.ShapeDtypeStruct(shape, dtype)


class TpuKernelTest(parameterized.TestCase):
  def test_payload_aliased_and_witnesses_are_operands(self):
    text = tpu_text(
      lambda x, y, w, v: entangle((x * 2, y + 1), w, v),
      spec((1024,)),
      spec((8, 128), jnp.int32),
      spec(()),
      spec((4, 5), jnp.bfloat16),
    )
    (call,) = kernel_calls(text)
    operands = match(r"@tpu_custom_call\(([^)]*)\)", call).group(1)
    self.assertLen(operands.split(","), 4)  # 2 payload, 2 witnesses
    aliases = re.findall(
      r"output_tuple_indices = \[(\d*)\], operand_index = (\d+)", call
    )
    self.assertEqual(aliases, [("0", "0"), ("1", "1")])
    self.assertIn('kernel_name = "entangle"', call)
    self.assertNotIn("optimization_barrier", text)
    self.assertNotIn(ENTANGLE_TARGET, text)

  def test_the_witness_reaches_the_call_the_result_is_read_from(self):
    # The result that the program goes on with is the kernel's, and the
    # witness is one of the kernel's operands: the data dependence XLA:TPU
    # keeps. The identity has none.
    def tied(x, w):
      return entangle(x + 1, w * 3) * 2

    text = tpu_text(tied, spec((1024,)), spec((16,)))
    (call,) = kernel_calls(text)
    result, operands = match(
      r"(%\S+) = stablehlo.custom_call @tpu_custom_call\(([^)]*)\)", call
    ).groups()
    witness = match(r"(%\S+) = stablehlo.multiply %arg1", text).group(1)
    sources = [through_reshapes(text, v.strip()) for v in operands.split(",")]
    self.assertIn(witness, sources)
    used = match(r"(%\S+) = stablehlo.multiply (%\S+), ", text.split(call)[1])
    self.assertEqual(through_reshapes(text, used.group(2)), result)
    plain = tpu_text(lambda x, w: (x + 1) * 2, spec((1024,)), spec((16,)))
    self.assertEqual(kernel_calls(plain), [])

  def test_without_a_chip_vectors_go_in_as_rows(self):
    # Newer Pallas (jax 0.10.2) asks the attached TPU about rank-1
    # operands; here there is none, so they go in as (1, n) (a bitcast),
    # and scalar witnesses as (1, 1). Older Pallas (0.6.2) asks nothing:
    # (n,) and (1,).
    if not jax_compat.pallas_tpu_rank1_needs_rows():
      (call,) = kernel_calls(
        tpu_text(lambda x, w: entangle(x, w), spec((3,)), spec(()))
      )
      self.assertIn("(tensor<3xf32>, tensor<1xf32>) -> tensor<3xf32>", call)
      return
    (call,) = kernel_calls(
      tpu_text(lambda x, w: entangle(x, w), spec((3,)), spec(()))
    )
    self.assertIn("(tensor<1x3xf32>, tensor<1x1xf32>) -> tensor<1x3xf32>", call)

  @parameterized.parameters(*sorted(tpu_kernel.TPU_KERNEL_DTYPES, key=str))
  def test_dtypes_the_kernel_takes(self, dtype):
    text = tpu_text(
      lambda x, w: entangle(x, w), spec((2, 3), dtype), spec((5,), dtype)
    )
    self.assertLen(kernel_calls(text), 1)

  @parameterized.named_parameters(
    ("scalar_payload", spec(()), spec((3,)), ("pad",)),
    ("one_element_payload", spec((1, 1)), spec((3,)), ("pad",)),
    ("bool", spec((3,), jnp.bool_), spec((3,)), ("widen",)),
    ("scalar_bool", spec((), jnp.bool_), spec(()), ("widen", "pad")),
    ("float16", spec((3,), jnp.float16), spec((3,)), ("bitcast",)),
    ("float8", spec((3,), ml_dtypes.float8_e4m3fn), spec((3,)), ("bitcast",)),
    ("float4", spec((), ml_dtypes.float4_e2m1fn), spec(()), ("bitcast", "pad")),
    ("complex", spec((3,), jnp.complex64), spec((3,)), ("split",)),
    ("scalar_complex", spec((), jnp.complex64), spec(()), ("split",)),
  )
  def test_other_operands_go_in_carried(self, payload, witness, steps):
    # Issue 60: a scalar payload through the barrier let XLA:TPU run a
    # host callback before the one it was entangled with (20 of 20 runs);
    # padded into the kernel, 0 of 20 (docs/platforms.md, "TPU").
    text = tpu_text(lambda x, w: entangle(x, w), payload, witness)
    self.assertLen(kernel_calls(text), 1)
    self.assertNotIn("stablehlo.optimization_barrier", text)
    carrier = tpu_kernel.carrier(payload.shape, payload.dtype, payload=True)
    assert carrier is not None
    self.assertEqual(carrier.steps, steps)

  @parameterized.named_parameters(
    ("zero_size_payload", spec((0, 4)), spec((3,))),
    ("zero_size_witness", spec((3,)), spec((0,))),
    ("int2_witness", spec((3,)), spec((3,), ml_dtypes.int2)),
    ("uint2", spec((3,), ml_dtypes.uint2), spec((3,))),
  )
  def test_falls_back_to_the_barrier(self, payload, witness):
    text = tpu_text(lambda x, w: entangle(x, w), payload, witness)
    self.assertEqual(kernel_calls(text), [])
    self.assertIn("stablehlo.optimization_barrier", text)

  def test_a_token_witness_takes_the_barrier_with_the_token(self):
    # A Pallas kernel takes no token: the barrier takes the token itself.
    text = tpu_text(lambda x: entangle(x, jax.lax.create_token()), spec((8,)))
    self.assertEqual(kernel_calls(text), [])
    barrier = match(r"stablehlo.optimization_barrier (.*)", text).group(1)
    self.assertIn("!stablehlo.token", barrier)
    # Control: an array witness in its place takes the kernel.
    text = tpu_text(lambda x, w: entangle(x, w), spec((8,)), spec((8,)))
    self.assertLen(kernel_calls(text), 1)

  def test_float64_falls_back_to_the_barrier(self):
    # On the v5e, float64 as 32-bit words did not come back bit for bit.
    self.addCleanup(
      jax.config.update, "jax_enable_x64", jax.config.read("jax_enable_x64")
    )
    jax.config.update("jax_enable_x64", True)
    text = tpu_text(
      lambda x, w: entangle(x, w), spec((3,), jnp.float64), spec((3,))
    )
    self.assertEqual(kernel_calls(text), [])
    self.assertIsNone(tpu_kernel.carrier((3,), jnp.float64, payload=True))

  @parameterized.product(
    dtype=(
      "float32",
      "bool",
      "float16",
      "bfloat16",
      "int4",
      "uint8",
      "float8_e5m2",
      "float4_e2m1fn",
      "complex64",
    ),
    shape=((), (1,), (3,), (2, 3)),
  )
  def test_carried_values_come_back_bit_for_bit(self, dtype, shape):
    # What the kernel is handed and what is made of its result, without
    # the kernel (which needs a TPU): every value back, bit for bit, in a
    # dtype the kernel takes and, for a payload, 2 elements or more.
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    x = ((np.arange(int(np.prod(shape))) + 1) % 3).reshape(shape).astype(dt)
    if dt.kind == "c":
      x = x - 1.5j
    carrier = tpu_kernel.carrier(shape, dt, payload=True)
    assert carrier is not None
    into = jax.eval_shape(carrier.into, spec(shape, dt))
    self.assertIn(into.dtype, tpu_kernel.TPU_KERNEL_DTYPES)
    self.assertGreaterEqual(into.size, tpu_kernel.PAYLOAD_MIN_SIZE)
    back = np.asarray(jax.jit(lambda a: carrier.back(carrier.into(a)))(x))
    self.assertEqual((back.dtype, back.shape), (x.dtype, x.shape))
    self.assertEqual(back.tobytes(), x.tobytes())

  def test_scalar_witness_with_a_vector_payload_takes_the_kernel(self):
    text = tpu_text(
      lambda x, w: entangle(x, w), spec((2,)), spec((), jnp.int32)
    )
    self.assertLen(kernel_calls(text), 1)

  def test_typed_key_goes_in_as_uint32(self):
    key = jax.eval_shape(lambda: jax.random.key(0, impl="threefry2x32"))
    (call,) = kernel_calls(
      tpu_text(lambda k, w: entangle(k, w), spec((4,), key.dtype), spec((3,)))
    )
    self.assertIn("tensor<4x2xui32>", call)

  def test_more_than_128_leaves_take_one_call_a_chunk(self):
    leaves = [spec((2,)) for _ in range(130)]
    text = tpu_text(lambda ls, w: entangle(ls, w), leaves, spec((3,)))
    self.assertLen(kernel_calls(text), 2)

  def test_cpu_keeps_its_custom_call(self):
    text = (
      jax.jit(lambda x, w: entangle(x, w))
      .lower(np.ones(3, np.float32), 1.0)
      .as_text()
    )
    self.assertIn(ENTANGLE_TARGET, text)
    self.assertEqual(kernel_calls(text), [])


if __name__ == "__main__":
  absltest.main()
