"""Sharding of entangle's custom call: no collectives, every sharding kept.

XLA's SPMD partitioner treats a custom call it knows nothing about as
replicated: it all-gathers the operands in front and slices the results
behind. Two things tell it better:

* a Shardy sharding rule on each call (`annotate`): every operand dimension
  is a factor of its own and each payload result reuses its operand's
  factors, so propagation gives each result its payload's sharding and never
  asks a witness to move. On its own it removes no collective;
* a partitioner registered for the target name (`register_partitioner`).
  XLA calls it while it partitions a multi-device module; it keeps every
  operand's sharding as it is, gives each payload result its operand's
  sharding, and hands XLA the plain aliasing custom call on the local shards
  as the per-device program.

The partitioner is found by target name, not through anything stored in the
module, so it serves `jit`, `shard_map` (fully or partially manual) and
modules exported with an `AbstractMesh` and compiled in another process, as
long as that process has imported `entangle_jax`. Nothing here needs devices
during lowering, and the lowered module holds no per-process key, so it can
hit the persistent compilation cache.

The partitioner is registered through jaxlib's
`register_custom_call_partitioner` and JAX's plugin hook, both private API
reached through `entangle_jax._src.jax_compat`;
tests/loading/private_api_test.py fails when either disappears or changes
meaning.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from jax.interpreters import mlir

from entangle_jax._src import jax_compat

TOKEN = "token"
"""A token witness among a partitioned call's local operands (it has no
shape or dtype)."""

# (local operand shapes and dtypes, or `TOKEN`, number of payload leaves)
# -> the per-device program as MLIR text.
ShardProgram = Callable[
  [tuple[tuple[tuple[int, ...], np.dtype] | str, ...], int], str
]

# Shardy names factors i, j, ..., z, then z_1, z_2, ... in its text form.
_FIRST_FACTORS = "ijklmnopqrstuvwxyz"


def factor_name(index: int) -> str:
  """Shardy's name for the `index`-th factor of a sharding rule."""
  if index < len(_FIRST_FACTORS):
    return _FIRST_FACTORS[index]
  return f"z_{index - len(_FIRST_FACTORS) + 1}"


def sharding_rule(shapes: Sequence[Sequence[int]], num_payload: int) -> str:
  """The Shardy rule, as text, of a call whose results mirror its leading
  operands.

  Args:
    shapes: the shape of every operand, payload leaves first.
    num_payload: how many leading operands are payload; result ``i`` has
      operand ``i``'s shape and aliases it.

  Returns:
    An ``#sdy.op_sharding_rule`` in which each operand dimension is a factor
    of its own and each result reuses its operand's factors.
  """
  mappings, sizes = [], []
  for shape in shapes:
    names = []
    for size in shape:
      name = factor_name(len(sizes))
      names.append(name)
      sizes.append(f"{name}={size}")
    mappings.append(f"[{', '.join(names)}]")
  operands = ", ".join(mappings)
  results = ", ".join(mappings[:num_payload])
  return (
    f"#sdy.op_sharding_rule<({operands})->({results}) "
    f"{{{', '.join(sizes)}}}, custom>"
  )


def annotate(op) -> None:
  """Attaches `sharding_rule` to the custom call `op`.

  Shapes come from `op`'s own operands, and its results are taken to alias
  its leading operands, result ``i`` to operand ``i``. Shape-polymorphic
  (dynamic) dimensions have no size a rule can name, and Shardy takes no
  rule for a call with a token operand (a token witness), so such a call
  gets no rule: the partitioner alone then keeps its shardings.
  """
  shapes = []
  for value in op.operands:
    shape = _shape(value.type)
    if shape is None:
      return
    shapes.append(shape)
  if any(size < 0 for shape in shapes for size in shape):
    return
  op.attributes["sdy.sharding_rule"] = mlir.ir.Attribute.parse(
    sharding_rule(shapes, len(op.results))
  )


def _shape(type_) -> list[int] | None:
  """The dimensions of an operand of type `type_`; None for a token."""
  try:
    return list(mlir.ir.RankedTensorType(type_).shape)
  except ValueError:  # Not a ranked tensor: a token.
    return None


def register_partitioner(target: str, shard_program: ShardProgram) -> None:
  """Makes XLA partition every custom call to `target` shard by shard.

  Args:
    target: the FFI target name. Each call's results must alias its leading
      operands, result ``i`` to operand ``i``.
    shard_program: builds the per-device program for given local operand
      shapes and dtypes and a number of payload leaves: the plain custom call
      on those shards, as MLIR text.
  """
  register = functools.partial(
    jax_compat.register_custom_call_partitioner,
    target,
    _propagate_user_sharding,
    functools.partial(_partition, shard_program),
    _infer_sharding_from_operands,
  )
  register()
  # GPU plugins run their own compiler, with a registry of their own.
  jax_compat.register_plugin_callbacks(lambda c_api: register(c_api=c_api))


def _result_shapes(result_shape) -> list:
  if result_shape.is_tuple():
    return list(result_shape.tuple_shapes())
  return [result_shape]


def _pack(result_shape, shardings: list):
  if result_shape.is_tuple():
    return jax_compat.HloSharding.tuple_sharding(result_shape, shardings)
  return shardings[0]


def _partition(
  shard_program: ShardProgram,
  arg_shapes,
  arg_shardings,
  result_shape,
  result_sharding,
  backend_config,
):
  # Keep every operand where it is and give each payload result its payload
  # operand's sharding: each device then runs the plain call on its shards.
  del result_sharding, backend_config
  num_payload = len(_result_shapes(result_shape))
  local = tuple(
    TOKEN
    if shape.is_token()
    else (
      tuple(sharding.tile(shape).dimensions()),
      np.dtype(shape.numpy_dtype()),
    )
    for shape, sharding in zip(arg_shapes, arg_shardings, strict=True)
  )
  program = shard_program(local, num_payload).encode()
  results = list(arg_shardings[:num_payload])
  return program, list(arg_shardings), _pack(result_shape, results)


def _infer_sharding_from_operands(
  arg_shapes, arg_shardings, result_shape, backend_config
):
  # GSPMD's propagation (Shardy reads `sharding_rule` instead).
  del arg_shapes, backend_config
  num_payload = len(_result_shapes(result_shape))
  return _pack(result_shape, list(arg_shardings[:num_payload]))


def _propagate_user_sharding(user_sharding, shape, backend_config):
  # A result can take whatever sharding its user asks for: it is its
  # operand, which can be sharded that way too.
  del shape, backend_config
  return user_sharding
