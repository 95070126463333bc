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

import functools

import jax
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
"""The dtypes the TPU kernel takes: those whose values came back unchanged
through it on a TPU v5e (jax 0.10.2, libtpu 0.0.42.1; docs/platforms.md).
Typed PRNG keys reach the primitive as uint32. Mosaic would not compile
float16; int2 crashed the process; bool, the float8 and float4 types did
not come back equal in a check that was not conclusive for them; complex
was not tried (docs/platforms.md, "TPU")."""


def takes(aval, *, payload: bool) -> bool:
  """Whether the TPU kernel takes this operand.

  A dtype of `TPU_KERNEL_DTYPES`, not zero-size (there is no buffer to
  alias), and, for a payload operand, more than one element: a scalar
  payload, as a 1-element array, came back wrong on the TPU unless a host
  callback had made it (the aliased result was not the scalar's buffer),
  and a 1-element array is the same buffer. A scalar witness is fine: the
  kernel never reads it.
  """
  return (
    aval.dtype in TPU_KERNEL_DTYPES
    and aval.size > 0
    and (aval.size > 1 or not payload)
  )


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


def call(*operands, num_payload: int, two_d: bool = False):
  """The payload back from one Pallas TPU call that also takes every witness.

  Each operand stays where it lies (``pl.ANY``: no copy into the core's
  memory); each payload operand aliases its result; the kernel does nothing.
  Scalars (and, with ``two_d``, vectors) go in reshaped, which XLA does as
  a bitcast.
  """
  from jax.experimental import pallas as pl

  shapes = [jax.numpy.shape(x) for x in operands]
  inputs = [
    x.reshape(_kernel_shape(s, two_d=two_d))
    for x, s in zip(operands, shapes, strict=True)
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
    r.reshape(s) for r, s in zip(results, shapes[:num_payload], strict=True)
  ]


def lowering(ctx, *operands, num_payload: int):
  if all(
    takes(aval, payload=i < num_payload) for i, aval in enumerate(ctx.avals_in)
  ):
    two_d = (
      any(len(a.shape) < 2 for a in ctx.avals_in)
      and jax_compat.pallas_tpu_rank1_needs_rows()
    )
    lower = mlir.lower_fun(
      functools.partial(call, num_payload=num_payload, two_d=two_d),
      multiple_results=True,
    )
  else:
    lower = mlir.lower_fun(
      functools.partial(_barrier, num_payload=num_payload),
      multiple_results=True,
    )
  return lower(ctx, *operands)
