"""How the `entangle` primitive becomes XLA on TPU: a Pallas kernel that
does nothing.

User FFI handlers cannot run on TPU, so there `entangle` is a Pallas TPU
kernel whose body does nothing: a Mosaic custom call (``tpu_custom_call``)
that takes the payload and every witness where they lie (memory space ANY,
nothing copied) and whose results alias the payload. XLA:TPU cannot see
into it, so the payload stays after the witnesses, host callbacks included.
Where the kernel does not take an operand (`takes`), that call falls back to
XLA's ``optimization_barrier``, which keeps the values right but which
XLA:TPU removes before scheduling, so it does not order host callbacks
(docs/platforms.md, "TPU").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.mlir.dialects import stablehlo
from jax.interpreters import mlir

from entangle_jax._src import jax_compat


def _barrier(*operands, num_payload: int):
  return jax.lax.optimization_barrier(list(operands))[:num_payload]


TPU_KERNEL_DTYPES = frozenset(
  map(
    jax.numpy.dtype,
    (
      "float32",
      "bfloat16",
      "int32",
      "uint32",
      "int16",
      "uint16",
      "int8",
      "uint8",
      "int4",
      "uint4",
    ),
  )
)
"""The dtypes the TPU kernel takes as they are: those whose values came back
unchanged through it on a TPU v5e (jax 0.10.2, libtpu 0.0.42.1;
docs/platforms.md). Typed PRNG keys reach the primitive as uint32. Mosaic
would not compile float16; other dtypes go in as the same bits in one of
these (`carrier`)."""


PAYLOAD_MIN_SIZE = 2
"""The fewest elements a payload operand has in the kernel. A 1-element
payload (a scalar) aliased through the kernel came back wrong on a TPU v5e
unless a host callback had made it, while payloads of 2 or more elements
came back right (docs/platforms.md, "TPU"); so a smaller payload goes in
padded (`carrier`)."""


@dataclasses.dataclass(frozen=True)
class Carrier:
  """How one operand goes into the kernel and, for a payload, comes back.

  Attributes:
    into: the operand as the kernel takes it (a dtype of
      `TPU_KERNEL_DTYPES`, and for a payload, `PAYLOAD_MIN_SIZE` elements
      or more).
    back: the payload again, from the kernel's result for ``into(payload)``.
    steps: what `into` does, in order: ``"bitcast"`` (the same bits as an
      unsigned type, no copy), ``"widen"`` (bool to 8 bits: a copy),
      ``"split"`` (complex into its real and imaginary parts), ``"pad"``
      (a payload of fewer than `PAYLOAD_MIN_SIZE` elements, to that many:
      a copy of one element).
  """

  into: Callable[[jax.Array], jax.Array]
  back: Callable[[jax.Array], jax.Array]
  steps: tuple[str, ...] = ()


_AS_IS = Carrier(into=lambda x: x, back=lambda y: y)


def _then(first: Carrier, second: Carrier) -> Carrier:
  return Carrier(
    into=lambda x: second.into(first.into(x)),
    back=lambda y: first.back(second.back(y)),
    steps=first.steps + second.steps,
  )


def _bits(dtype: np.dtype) -> int:
  if jnp.issubdtype(dtype, jnp.integer):
    return jnp.iinfo(dtype).bits
  if jnp.issubdtype(dtype, jnp.floating):
    return jnp.finfo(dtype).bits
  return dtype.itemsize * 8


def _widened(dtype: np.dtype) -> Carrier:
  # No kernel dtype is 1 bit wide; 8 bits hold both values.
  return Carrier(
    into=lambda x: x.astype(jnp.uint8),
    back=lambda y: y.astype(dtype),
    steps=("widen",),
  )


def _split(dtype: np.dtype) -> Carrier:
  return Carrier(
    into=lambda x: jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1),
    back=lambda y: jax.lax.complex(y[..., 0], y[..., 1]).astype(dtype),
    steps=("split",),
  )


def _bitcast(dtype: np.dtype, bits: int) -> Carrier:
  # 64-bit values go in as pairs of 32-bit words (a trailing axis of 2).
  target = jnp.dtype(f"uint{min(bits, 32)}")
  return Carrier(
    into=lambda x: jax.lax.bitcast_convert_type(x, target),
    back=lambda y: jax.lax.bitcast_convert_type(y, dtype),
    steps=("bitcast",),
  )


NO_CARRIER_DTYPES = frozenset(
  map(jnp.dtype, ("int2", "uint2", "float64", "complex128"))
)
"""Dtypes that keep the barrier on TPU (docs/platforms.md, "TPU", has what a
v5e gave): 2-bit integers crash or fail XLA:TPU with or without entangle;
float64 (emulated there) did not come back bit for bit as 32-bit words,
while the same program without entangle did, and complex128 is two
float64s."""


def _dtype_carrier(dtype: np.dtype) -> Carrier | None:
  """How values of `dtype` go in as a dtype of `TPU_KERNEL_DTYPES`, bit for
  bit; None where no way was shown to keep every value."""
  if dtype in TPU_KERNEL_DTYPES:
    return _AS_IS
  if dtype in NO_CARRIER_DTYPES:
    return None
  if dtype == np.dtype(bool):
    return _widened(dtype)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    part = _dtype_carrier(np.dtype(jnp.finfo(dtype).dtype))
    return None if part is None else _then(_split(dtype), part)
  bits = _bits(dtype)
  if bits in (4, 8, 16, 32, 64):
    return _bitcast(dtype, bits)
  return None


def _padded(carried: jax.ShapeDtypeStruct, through: Carrier) -> Carrier:
  size = int(np.prod(carried.shape))

  def into(x):
    flat = through.into(x).reshape((size,))
    fill = jnp.zeros((PAYLOAD_MIN_SIZE - size,), flat.dtype)
    return jnp.concatenate([flat, fill])

  def back(y):
    return through.back(y[:size].reshape(carried.shape))

  return Carrier(into=into, back=back, steps=(*through.steps, "pad"))


def carrier(shape, dtype, *, payload: bool) -> Carrier | None:
  """How the kernel takes an operand of `shape` and `dtype`, or None where
  it cannot.

  The kernel takes the dtypes of `TPU_KERNEL_DTYPES` as they are; other
  dtypes go in as the same bits in one of them (bool widened to 8 bits,
  complex as its two parts), except those of `NO_CARRIER_DTYPES`. A
  payload of fewer than `PAYLOAD_MIN_SIZE` elements goes in padded, and
  comes back from the padded result. A witness never comes back: the
  kernel takes it only so that the call runs after it. A zero-size operand
  has no buffer to alias or to wait for: None (that call keeps the
  barrier).
  """
  if 0 in shape:
    return None
  through = _dtype_carrier(np.dtype(dtype))
  if through is None or not payload:
    return through
  carried = jax.eval_shape(through.into, jax.ShapeDtypeStruct(shape, dtype))
  if np.prod(carried.shape) >= PAYLOAD_MIN_SIZE:
    return through
  return _padded(carried, through)


def _kernel_shape(shape, *, two_d: bool):
  if len(shape) >= 2:
    return shape
  if two_d:
    return (1, *shape) if shape else (1, 1)
  return shape or (1,)


def _entangle_kernel(*refs):
  # Nothing to do: the results are the payload's own buffers (aliased), and
  # the witnesses are operands only so that this call runs after them.
  del refs


def call(*operands, num_payload: int, two_d: bool | None = None):
  """The payload back from one Pallas TPU call that also takes every witness.

  Each operand goes in as its `carrier` says, and stays where it lies
  (``pl.ANY``: no copy into the core's memory); each payload operand
  aliases its result; the kernel does nothing. Scalars (and, with
  ``two_d``, vectors) go in reshaped, which XLA does as a bitcast; left
  None, ``two_d`` is whether Pallas needs rows here
  (`jax_compat.pallas_tpu_rank1_needs_rows`).
  """
  from jax.experimental import pallas as pl

  carriers: list[Carrier] = []
  for i, x in enumerate(operands):
    found = carrier(jnp.shape(x), x.dtype, payload=i < num_payload)
    if found is None:
      raise ValueError(
        "entangle's TPU kernel cannot take an operand of shape "
        f"{jnp.shape(x)} and dtype {x.dtype} (see tpu_kernel.carrier)"
      )
    carriers.append(found)
  carried = [c.into(x) for c, x in zip(carriers, operands, strict=True)]
  shapes = [x.shape for x in carried]
  if two_d is None:
    two_d = (
      any(len(s) < 2 for s in shapes)
      and jax_compat.pallas_tpu_rank1_needs_rows()
    )
  inputs = [
    x.reshape(_kernel_shape(s, two_d=two_d))
    for x, s in zip(carried, shapes, strict=True)
  ]
  anywhere = pl.BlockSpec(memory_space=pl.ANY)
  results = pl.pallas_call(
    _entangle_kernel,
    out_shape=[
      jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs[:num_payload]
    ],
    in_specs=[anywhere] * len(inputs),
    out_specs=[anywhere] * num_payload,
    input_output_aliases={i: i for i in range(num_payload)},
    name="entangle",
  )(*inputs)
  return [
    c.back(r.reshape(s))
    for c, r, s in zip(carriers, results, shapes, strict=False)
  ]


def lowering(ctx, *operands, num_payload: int):
  """entangle's TPU lowering: the kernel (`call`) where every operand has a
  `carrier`, else XLA's ``optimization_barrier``. A token witness is no
  array a Pallas kernel takes: a call with one keeps the barrier, which
  takes tokens (and which XLA:TPU removes: docs/platforms.md, "TPU")."""
  if any(jax_compat.is_token_aval(aval) for aval in ctx.avals_in):
    # JAX's optimization_barrier takes no token: the op itself does.
    barrier = stablehlo.OptimizationBarrierOp(list(operands))
    return list(barrier.results)[:num_payload]
  if all(
    carrier(aval.shape, aval.dtype, payload=i < num_payload) is not None
    for i, aval in enumerate(ctx.avals_in)
  ):
    body = functools.partial(call, num_payload=num_payload)
  else:
    body = functools.partial(_barrier, num_payload=num_payload)
  return mlir.lower_fun(body, multiple_results=True)(ctx, *operands)
