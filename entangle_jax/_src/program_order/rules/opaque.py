"""Primitives that hold a sub-program and rules of the user's that JAX
runs later: ``custom_vmap_call`` (``jax.custom_batching.custom_vmap``:
a batching rule) and ``custom_partitioning``
(``jax.experimental.custom_partitioning``: sharding and partitioning
rules, run when XLA partitions the module). Their sub-program is not
rebuilt around an order value: the equation is bound again with its
rules, and ordered as one native call, read from its lowering as a
binding's own primitive is (`natives.lowered_call`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from entangle_jax._src.program_order import natives
from entangle_jax._src.program_order.rule_inputs import RuleResult
from entangle_jax._src.program_order.rules.registry import family, register

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import NativeCalls

OPAQUE = family(
  "custom batching and partitioning",
  "bound again with the user's batching or sharding rules; ordered as one "
  "native call: every call in it after the earlier calls it conflicts "
  "with, the later calls after its results, its sub-program's calls among "
  "themselves in program order. A rule runs on the operands ordered so",
  __name__.rsplit(".", 1)[-1],
)


@register(OPAQUE, ("custom_vmap_call", "custom_partitioning"))
def opaque_call(ctx: NativeCalls, eqn, invals: list) -> RuleResult:
  found = natives.lowered_call(eqn, ctx.decls, ctx.scopes())
  if found is None:  # Its calls are declared to touch nothing.
    return RuleResult(ctx.bind(ctx.ordered_bodies(eqn), invals))
  return RuleResult(ctx.native(eqn, invals, found))
