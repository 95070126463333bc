"""How each host callback's primitive takes a carrier (`registry.CARRIERS`):
one more operand to be ordered by, where it has none with elements, and
one more result for later calls to wait for, where it returns none with
elements. The interpreter orders a host callback as any native call
(`Context.native`); what its primitive can take is said here, one rule
per primitive, as the ordering rules are registered per primitive."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.core import ShapedArray

from entangle_jax._src.program_order.rules.registry import register_carrier
from entangle_jax._src.program_order.values import size


@dataclasses.dataclass(frozen=True)
class Carried:
  """A host callback's ``callback`` parameter that takes one more operand
  than the user's function (`drops_last`), which it does not pass on, and
  returns one more result (`adds_result`), an int32 zero, for later calls
  to wait for: what the user's function sees and returns is what the
  program gave it. Equal for equal parts, as JAX's own callback parameter
  is, so that equal programs share a compilation."""

  callback: Any
  drops_last: bool
  adds_result: bool

  def __call__(self, *flat_args):
    if self.drops_last:
      flat_args = flat_args[:-1]
    results = self.callback(*flat_args)
    if not self.adds_result:
      return results
    return [*(results or ()), np.zeros((), np.int32)]


def _always(eqn) -> bool:
  del eqn
  return True


def _returns_no_element(eqn) -> bool:
  """Whether none of `eqn`'s results holds an element: nothing a later
  call could wait for."""
  return not any(size(v.aval) > 0 for v in eqn.outvars)


@register_carrier(
  ("io_callback",), takes_operand=_always, adds_result=_returns_no_element
)
@register_carrier(("debug_callback",), takes_operand=_always)
def bind_callback(eqn, invals, adds_operand: bool, adds_result: bool) -> list:
  """``io_callback`` and ``debug_callback``: their primitives call
  ``callback`` with the flat operands and take its flat results, so
  `Carried` hides the carrier operand from the user's function and adds
  the carrier result."""
  params = dict(eqn.params)
  params["callback"] = Carried(params["callback"], adds_operand, adds_result)
  if adds_result:
    params["result_avals"] = (
      *params["result_avals"],
      ShapedArray((), np.dtype(np.int32)),
    )
  return list(eqn.primitive.bind(*invals, **params))


PRINT_CARRIER = "entangle_jax_carrier"
"""The keyword a carrier operand of ``jax.debug.print`` is passed as: its
text's ``str.format`` ignores a keyword it does not name."""


def print_carries(eqn) -> bool:
  """Whether ``jax.debug.print``'s primitive (``debug_print``, jax 0.10
  and newer; older ones bind ``debug_callback``) with no operand can take
  a carrier operand without printing anything else: its text, formatted
  with the carrier as a keyword it does not name, is the text it prints
  (no brace, which formatting would change, and no static argument)."""
  if eqn.invars:
    return False
  params = eqn.params
  fmt = params.get("fmt")
  if not isinstance(fmt, str) or params.get("static_args"):
    return False
  return params.get("has_placeholders") or ("{" not in fmt and "}" not in fmt)


_UNORDERED_PRINT = (
  "in_program_order: a jax.debug.print with no operand whose text "
  "holds a brace, or that takes static arguments, cannot be ordered "
  "after earlier native calls; it runs when XLA runs it. Pass it an "
  "operand (jax.debug.print('... {}', x)) to order it."
)


@register_carrier(
  ("debug_print",), takes_operand=print_carries, unordered=_UNORDERED_PRINT
)
def bind_print(eqn, invals, adds_operand: bool, adds_result: bool) -> list:
  """``debug_print``: the carrier operand passed as a keyword its text does
  not name (`print_carries`); it returns nothing, and gets no result."""
  del adds_operand, adds_result
  params = dict(eqn.params)
  params["in_tree"] = jax.tree.structure(((), {PRINT_CARRIER: 0}))
  params["has_placeholders"] = True
  return list(eqn.primitive.bind(*invals, **params))
