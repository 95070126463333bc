"""First-order primitives with a rule of their own: ``entangle`` (its
results carry its payloads' objects and its operands' calls) and the views
of a value (a slice, a reshape: the view names the objects its elements
name). Any other first-order primitive that is not a native call is bound
as it is (`Context.bind`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from entangle_jax._src import jax_compat, primitive
from entangle_jax._src.program_order.rule_inputs import RuleResult
from entangle_jax._src.program_order.rules.registry import family, register
from entangle_jax._src.program_order.touches import VIEWS

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import Values

FIRST_ORDER = family(
  "first order",
  "always applies: `entangle`'s results name its payloads' objects and "
  "come after its operands' calls; a view names the objects its elements "
  "name. Native calls are ordered by their declarations, and every other "
  "primitive is bound as it is",
  __name__.rsplit(".", 1)[-1],
)


@register(FIRST_ORDER, (primitive.entangle_p.name,), higher_order=False)
def entangle_rule(ctx: Values, eqn, invals: list) -> RuleResult:
  outs = jax_compat.bind_equation(eqn, invals)
  bits = 0
  for value in invals:
    bits |= ctx.dep(value)
  for value, out in zip(invals, outs, strict=False):  # Payloads first.
    ctx.set_root(out, ctx.root(value))
    ctx.set_dep(out, bits)
  return RuleResult(outs)


@register(FIRST_ORDER, VIEWS, higher_order=False)
def view(ctx: Values, eqn, invals: list) -> RuleResult:
  outs = ctx.bind(eqn, invals)
  ctx.view(eqn, invals[0], outs[0])
  return RuleResult(outs)
