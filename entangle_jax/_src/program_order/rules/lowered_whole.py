"""JAX's higher-order primitives whose sub-programs XLA runs as the
lowering lays them out, not as the jaxpr nests them: ``custom_linear_solve``
(``lax.custom_linear_solve``, and so ``jax.scipy.sparse.linalg.cg`` and its
neighbours: the solve runs once, the matrix-vector product only under
differentiation) and ``composite`` (``lax.composite``: its decomposition).
Each is ordered as one native call read from its lowering, as a binding's
own primitive is (`natives.lowered_call`): every call it makes after the
earlier calls it conflicts with, the later calls after its results, and
its sub-programs' calls among themselves in program order. Bound again
with those ordered sub-programs, it keeps its own differentiation rules:
under ``grad`` the tangent and transposed solves run the ordered
sub-programs too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from entangle_jax._src.program_order import natives
from entangle_jax._src.program_order.rules.registry import family, register

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import NativeCalls

LOWERED_WHOLE = family(
  "linear solves and composites",
  "ordered as one native call read from its lowering (the solve it runs, "
  "the decomposition): every call in it after the earlier calls it "
  "conflicts with, the later calls after its results, its sub-programs' "
  "calls among themselves in program order; bound again with them, so "
  "that its own derivative rules (a tangent or transposed solve) run them",
  __name__.rsplit(".", 1)[-1],
)


@register(LOWERED_WHOLE, ("custom_linear_solve", "composite"))
def lowered_whole(ctx: NativeCalls, eqn, invals: list) -> list:
  found = natives.lowered_call(eqn, ctx.decls)
  if found is None:  # Its calls are declared to touch nothing.
    return ctx.bind(ctx.ordered_bodies(eqn), invals)
  return ctx.native(eqn, invals, found)
