"""How many times a loop of a module runs, where its program says so.

A ``stablehlo.while`` that JAX lowers from ``scan`` (and from a
``fori_loop`` with static bounds, which JAX lowers as a scan) counts one
element of its state from a constant, by a constant step, to a constant
limit: ``i < n`` in its condition, ``i + 1`` in its body. Such a loop runs
the same number of times in every execution, whatever the data; a call in
it runs that many times per run of the code around the loop.

The sanitizer reads it where a loop's iterations carry no marker (a
module that runs on a TPU, or over several devices): a call in an inner
loop whose trip count is known ran, in each iteration of the outer loop,
as many times as the inner loop's count says, so its k-th call belongs to
the outer loop's ``k // count``-th iteration (`checks.by_count`).
"""

from __future__ import annotations

from typing import Any

_LESS = ("LT", "LE")


def trip_count(ir: Any, op: Any) -> int | None:
  """The number of iterations of ``stablehlo.while`` `op` (of the MLIR
  bindings `ir`) where its condition compares a state element with a
  constant (``<`` or ``<=``), its body steps that element by a constant,
  and its start is a constant; None for any other loop (a data-dependent
  condition, a count that may wrap)."""
  if len(op.regions) != 2 or not op.regions[0].blocks:
    return None
  condition = _ops(op.regions[0].blocks[0])
  if not condition or len(condition[-1].operands) != 1:
    return None
  compare = _defining(ir, condition[-1].operands[0])
  if compare is None or compare.name != "stablehlo.compare":
    return None
  direction = str(compare.attributes["comparison_direction"])
  way = next((w for w in _LESS if f" {w}>" in direction), None)
  if way is None or len(compare.operands) != 2:
    return None
  counter = _argument_number(ir, compare.operands[0])
  limit = _constant(ir, compare.operands[1])
  if counter is None or limit is None or counter >= len(op.operands):
    return None
  start = _constant(ir, op.operands[counter])
  step = _step(ir, op, counter)
  if start is None or step is None or step <= 0:
    return None
  if way == "LE":
    limit += 1
  bits = _width(ir, compare.operands[0])
  if bits is None or limit + step > 2 ** (bits - 1):
    return None  # The counter might wrap before it gets there.
  return max(0, -((start - limit) // step))


def _step(ir: Any, op: Any, counter: int) -> int | None:
  """The constant the body adds to state element `counter`."""
  if not op.regions[1].blocks:
    return None
  body = _ops(op.regions[1].blocks[0])
  if not body or counter >= len(body[-1].operands):
    return None
  add = _defining(ir, body[-1].operands[counter])
  if add is None or add.name != "stablehlo.add" or len(add.operands) != 2:
    return None
  for mine, other in ((0, 1), (1, 0)):
    if _argument_number(ir, add.operands[mine]) == counter:
      return _constant(ir, add.operands[other])
  return None


def _ops(block: Any) -> list[Any]:
  return [o.operation for o in block.operations]


def _defining(ir: Any, value: Any) -> Any:
  """The operation that defines `value`; None for a block argument."""
  if _is(ir.OpResult, value):
    return ir.OpResult(value).owner
  return None


def _argument_number(ir: Any, value: Any) -> int | None:
  if _is(ir.BlockArgument, value):
    return ir.BlockArgument(value).arg_number
  return None


def _constant(ir: Any, value: Any) -> int | None:
  """The integer a scalar ``stablehlo.constant`` holds; None otherwise."""
  op = _defining(ir, value)
  if op is None or op.name != "stablehlo.constant":
    return None
  attribute = op.attributes["value"]
  if not _is(ir.DenseIntElementsAttr, attribute):
    return None
  dense = ir.DenseIntElementsAttr(attribute)
  if not dense.is_splat:
    return None
  return ir.IntegerAttr(dense.get_splat_value()).value


def _width(ir: Any, value: Any) -> int | None:
  """The bit width of a scalar integer value."""
  element = ir.RankedTensorType(value.type).element_type
  if not _is(ir.IntegerType, element):
    return None
  return ir.IntegerType(element).width


def _is(kind: Any, thing: Any) -> bool:
  """Whether `thing` is an MLIR `kind`: older bindings say so through
  ``kind.isinstance``, newer ones hand out the subclass itself."""
  test = getattr(kind, "isinstance", None)
  return test(thing) if test is not None else isinstance(thing, kind)
