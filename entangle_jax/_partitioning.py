"""Sharding-aware lowering of `entangle`: no collectives, shardings kept.

A plain custom call is opaque to XLA's SPMD partitioner, which then replicates
it: all-gathers in front, slices behind. Under a multi-device lowering we
instead lower through `custom_partitioning`, whose partition rule keeps every
operand's sharding and gives each payload result its payload's sharding; each
device then runs the plain, aliasing custom call on its own shard.
"""

from __future__ import annotations

import functools
import string

from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir

# custom_partitioning asks for the device assignment while lowering, which JAX
# only provides to primitives listed here. This is private JAX API; the test
# suite checks that it still exists (tests/private_api_test.py).
PRIVATE_DEVICE_SET = dispatch.prim_requires_devices_during_lowering


def needs_partitioning(ctx: mlir.LoweringRuleContext) -> bool:
  """Whether this lowering spans several devices and is not for export.

  Exported modules cannot hold custom_partitioning's Python callback, so they
  take the plain custom call (the partitioner may then add collectives).
  """
  module = ctx.module_context
  if module.lowering_parameters.for_export:
    return False
  devices = getattr(module.axis_context, "device_assignment", None)
  return devices is not None and len(devices) > 1


def sharding_rule(ranks: tuple[int, ...], num_payload: int) -> str:
  """A Shardy rule where each payload result mirrors its own operand.

  Every dimension of every operand gets a factor of its own, so the
  partitioner has no reason to move data between operands.
  """
  operands, results = [], []
  for i, rank in enumerate(ranks):
    factors = " ".join(f"{_letters(i)}{d}" for d in range(rank))
    operands.append(factors)
    if i < num_payload:
      results.append(factors)
  return f"{', '.join(operands)} -> {', '.join(results)}"


def _letters(index: int) -> str:
  # Factor names are identifiers; spell operand indices in letters.
  out = ""
  index += 1
  while index:
    index, digit = divmod(index - 1, 26)
    out = string.ascii_lowercase[digit] + out
  return out


def _result_shardings(arg_shapes, num_payload):
  return tuple(s.sharding for s in arg_shapes[:num_payload])


@functools.cache
def _partitioned(ranks: tuple[int, ...], num_payload: int):
  # Imported here: _primitive imports this module at load time.
  from entangle_jax import _primitive

  def entangled(*operands):
    return tuple(_primitive.entangle_p.bind(*operands, num_payload=num_payload))

  def partition(mesh, arg_shapes, result_shape):
    del result_shape
    arg_shardings = tuple(s.sharding for s in arg_shapes)
    return (
      mesh,
      entangled,
      _result_shardings(arg_shapes, num_payload),
      arg_shardings,
    )

  def infer(mesh, arg_shapes, result_shape):
    del mesh, result_shape
    return _result_shardings(arg_shapes, num_payload)

  fn = custom_partitioning(entangled)
  fn.def_partition(
    partition=partition,
    infer_sharding_from_operands=infer,
    sharding_rule=sharding_rule(ranks, num_payload),
  )
  return fn


def partitioned_lowering(ctx, *operands, num_payload: int):
  """Lowers `entangle` through custom_partitioning (multi-device only)."""
  ranks = tuple(len(a.shape) for a in ctx.avals_in)
  fn = _partitioned(ranks, num_payload)
  return mlir.lower_fun(lambda *xs: list(fn(*xs)), multiple_results=True)(
    ctx, *operands
  )


def allow_device_assignment(primitive) -> None:
  """Lets `primitive` see the device assignment while it is lowered."""
  PRIVATE_DEVICE_SET.add(primitive)
