"""The ops the sanitizer adds to a module it compiles: the execution op
that tells each host callback its execution and place
(`route_executions`). Where they go is `sites`' walk; this builds them."""

from __future__ import annotations

from typing import Any

from entangle_jax._src.targets.names import SANITIZER_COUNTER_SCOPE
from entangle_jax.testing._sanitize import wrapping
from entangle_jax.testing._sanitize.mlir_reading import (
  TYPED_FFI,
  typed_ffi_config,
)

SITE_ATTRIBUTE = "entangle_jax_sanitize_site"
"""The FFI attribute that carries a wrapped call's site number."""

SCALAR_LAYOUT = "dense<> : tensor<0xindex>"
"""The layout of a scalar operand or result of an added custom call."""


def route_executions(ir, callback_ops: dict[int, Any]) -> None:
  """Gives each host callback's custom call (`callback_ops`, by its site's
  number) two more operands: XLA's id of the execution it runs in, the
  result of an execution op (`names.SANITIZER_EXECUTION_TARGET`, scoped
  `SANITIZER_COUNTER_SCOPE`) put at the top of the function the call is
  in (nested loops and branches take it from there), and its site number,
  a constant. The callback's recorder takes them off again
  (`callbacks.execution_recorder`).

  So a callback's calls are in the execution of the native calls they ran
  with, whatever the thread or the loop they ran in, and each call has its
  own place, however many of the module's calls share its Python callable
  (a function lowered once and called twice, a recomputed checkpoint).
  The execution op is pure, takes nothing, and is one per function (XLA
  merges them once it inlines the functions): it orders nothing but the
  callbacks after the start of their execution.
  """
  target = wrapping.execution_target()
  where = ir.Location.name(SANITIZER_COUNTER_SCOPE)
  i64 = ir.IntegerType.get_signless(64)
  scalar = ir.RankedTensorType.get([], i64, loc=where)
  layout = ir.Attribute.parse(SCALAR_LAYOUT)
  executions: dict[Any, Any] = {}
  for number, op in callback_ops.items():
    func = function_of(op)
    execution = executions.get(func)
    if execution is None:
      block = func.regions[0].blocks[0]
      with ir.InsertionPoint.at_block_begin(block):
        execution = executions[func] = _scalar_call(
          ir, target, {}, side_effect=False, where=where
        )
    with ir.InsertionPoint(op):
      site = ir.Operation.create(
        "stablehlo.constant",
        results=[scalar],
        attributes={
          "value": ir.Attribute.parse(f"dense<{number}> : tensor<i64>")
        },
        loc=where,
      )
      attributes = {}
      for item in list(op.attributes):
        name = getattr(item, "name", item)  # Older bindings: NamedAttribute.
        attributes[name] = op.attributes[name]
      layouts = attributes.get("operand_layouts")
      if layouts is not None:
        attributes["operand_layouts"] = ir.ArrayAttr.get(
          [*ir.ArrayAttr(layouts), layout, layout]
        )
      routed = ir.Operation.create(
        "stablehlo.custom_call",
        results=[r.type for r in op.results],
        operands=[*op.operands, execution.result, site.result],
        attributes=attributes,
        loc=op.location,
      )
    for old, new in zip(op.results, routed.results, strict=True):
      old.replace_all_uses_with(new)
    op.erase()


def function_of(op) -> Any:
  """The ``func.func`` `op` is in."""
  parent = op.parent
  while parent is not None and parent.name != "func.func":
    parent = parent.parent
  if parent is None:
    raise ValueError("a host callback outside every function")
  return parent.operation


def add_iteration_marker(ir: Any, op: Any, target: str, number: int) -> bool:
  """Puts a call of `target` (the iteration marker, site `number`) at the
  top of loop `op`'s condition, and makes the condition read it: XLA tests
  the condition before each iteration and runs the body to its end before
  the next test, so the marker's calls count the iterations. The condition
  becomes ``its own and marker != INT64_MIN`` (the marker writes XLA's run
  id, never that value): XLA then cannot know the loop's trip count, and
  tests the condition before each iteration (XLA:CPU runs a loop of known
  trip count without its condition). False where the condition is not one
  value (left as it is)."""
  i64 = ir.IntegerType.get_signless(64)
  where = ir.Location.name(SANITIZER_COUNTER_SCOPE)
  block = op.regions[0].blocks[0]
  terminator = None
  for inner in block.operations:
    terminator = inner.operation
  if terminator is None or len(terminator.operands) != 1:
    return False
  scalar = ir.RankedTensorType.get([], i64, loc=where)
  with ir.InsertionPoint(terminator):
    config = {SITE_ATTRIBUTE: ir.IntegerAttr.get(i64, number)}
    marker = _scalar_call(ir, target, config, side_effect=True, where=where)
    never = ir.Operation.create(
      "stablehlo.constant",
      results=[scalar],
      attributes={
        "value": ir.Attribute.parse(f"dense<{-(2**63)}> : tensor<i64>")
      },
      loc=where,
    )
    pred = terminator.operands[0]
    differs = ir.Operation.create(
      "stablehlo.compare",
      results=[pred.type],
      operands=[marker.result, never.result],
      attributes={
        "comparison_direction": ir.Attribute.parse(
          "#stablehlo<comparison_direction NE>"
        )
      },
      loc=where,
    )
    both = ir.Operation.create(
      "stablehlo.and",
      results=[pred.type],
      operands=[pred, differs.result],
      loc=where,
    )
  terminator.operands[0] = both.result
  return True


def add_anchor(ir: Any, main: Any, template: Any, index: int) -> bool:
  """Adds, at the top of function `main`, a host callback's custom call
  copied from `template` (another callback of the module) that takes and
  returns nothing and calls host callable `index`: the anchor, whose
  calls count the module's executions (`sites.ANCHOR`). False where the
  template is no typed FFI call (nothing added)."""
  entries = {}
  for item in list(template.attributes):
    name = getattr(item, "name", item)  # Older bindings: NamedAttribute.
    if name in ("sdy.sharding", "mhlo.sharding", "mhlo.frontend_attributes"):
      continue
    entries[name] = template.attributes[name]
  key = typed_ffi_config(ir, template.attributes)
  if key is None:
    return False
  config = {}
  old = ir.DictAttr(template.attributes[key])
  for k in range(len(old)):
    config[old[k].name] = old[k].attr
  config["index"] = ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), index)
  entries[key] = ir.DictAttr.get(config)
  entries["operand_layouts"] = ir.ArrayAttr.get([])
  entries["result_layouts"] = ir.ArrayAttr.get([])
  # It returns nothing, so only a side effect keeps it: a call copied from
  # a pure_callback's would be deleted by XLA, and the module's callbacks
  # then left with no execution to be placed in.
  entries["has_side_effect"] = ir.BoolAttr.get(True)
  block = main.regions[0].blocks[0]
  # Its scope (op_name) names it to the static check, which leaves it out
  # of every question (`names.is_sanitizer_counter`): it is no call of the
  # user's program.
  where = ir.Location.name(SANITIZER_COUNTER_SCOPE)
  with where, ir.InsertionPoint.at_block_begin(block):
    ir.Operation.create(
      "stablehlo.custom_call", results=[], operands=[], attributes=entries
    )
  return True


def _scalar_call(
  ir: Any, target: str, config: dict, *, side_effect: bool, where: Any
) -> Any:
  """A typed FFI custom call of `target` (its attributes `config`) that
  takes nothing and returns an int64 scalar, at the insertion point."""
  i64 = ir.IntegerType.get_signless(64)
  return ir.Operation.create(
    "stablehlo.custom_call",
    results=[ir.RankedTensorType.get([], i64, loc=where)],
    operands=[],
    attributes={
      "call_target_name": ir.StringAttr.get(target),
      "api_version": ir.IntegerAttr.get(
        ir.IntegerType.get_signless(32), TYPED_FFI
      ),
      "backend_config": ir.DictAttr.get(config),
      "has_side_effect": ir.BoolAttr.get(side_effect),
      "operand_layouts": ir.ArrayAttr.get([]),
      "result_layouts": ir.ArrayAttr.get([ir.Attribute.parse(SCALAR_LAYOUT)]),
    },
    loc=where,
  )
