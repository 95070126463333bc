"""How the `entangle` primitive becomes XLA: one aliasing FFI custom call.

Importing this module registers, for `entangle_jax._src.primitive.entangle_p`:

* the lowering on every platform with user FFI handlers (CPU, CUDA, ROCm):
  an FFI custom call to entangle's no-op handler whose payload operands
  alias its results, annotated with a Shardy sharding rule;
* where the platform table names a kernel module instead
  (`platforms.Platform.kernel`), that module's lowering: on TPU, a Pallas
  kernel that does nothing (`entangle_jax._src.tpu_kernel`);
* the partitioner for entangle's target (`entangle_jax._src.partitioning`),
  with `shard_program` as the per-device program.
"""

from __future__ import annotations

import functools
import importlib

import jax
from jax.interpreters import mlir

from entangle_jax._src import native, partitioning
from entangle_jax._src.primitive import entangle_p
from entangle_jax._src.targets import platforms


def custom_call_lowering(ctx, *operands, num_payload: int):
  """Lowers to one FFI custom call; payload operands alias the results.

  A token witness is an operand too (a ``!stablehlo.token``, with an empty
  layout), so XLA schedules the call after the token's producer."""
  lower = jax.ffi.ffi_lowering(
    native.ENTANGLE_TARGET,
    operand_output_aliases={i: i for i in range(num_payload)},
  )
  return lower(ctx, *operands)


def _lowering(ctx, *operands, num_payload: int):
  # The plain custom call, whatever the devices: its sharding rule and the
  # partitioner registered for its target (`partitioning`) keep shardings,
  # and neither needs devices at lowering time, so AbstractMesh export works.
  results = custom_call_lowering(ctx, *operands, num_payload=num_payload)
  calls = []
  for result in results:
    if result.owner not in calls:
      calls.append(result.owner)
  for call in calls:
    partitioning.annotate(call)
  return results


@functools.lru_cache(maxsize=256)
def shard_program(operands, num_payload: int) -> str:
  """What each device runs when XLA partitions an entangle: the same custom
  call on the local shards, lowered for one device, as MLIR text."""
  # A token witness is given as a token: JAX lowers it to a token parameter.
  specs = [
    jax.lax.create_token()
    if operand == partitioning.TOKEN
    else jax.ShapeDtypeStruct(*operand)
    for operand in operands
  ]
  fn = jax.jit(functools.partial(entangle_p.bind, num_payload=num_payload))
  return fn.lower(*specs).as_text()


mlir.register_lowering(entangle_p, _lowering)
# Where entangle has a kernel module instead of its FFI custom call
# (`platforms.Platform.kernel`: the TPU's), that module lowers it.
for _row in platforms.PLATFORMS:
  if _row.kernel is not None:
    _kernel = importlib.import_module(_row.kernel)
    mlir.register_lowering(entangle_p, _kernel.lowering, platform=_row.name)
partitioning.register_partitioner(native.ENTANGLE_TARGET, shard_program)
