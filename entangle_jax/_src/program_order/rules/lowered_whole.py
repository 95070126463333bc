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

from entangle_jax._src.program_order.rules import opaque
from entangle_jax._src.program_order.rules.registry import family, register

LOWERED_WHOLE = family(
  "linear solves and composites",
  "ordered as one native call read from its lowering (the solve it runs, "
  "the decomposition): every call in it after the earlier calls it "
  "conflicts with, the later calls after its results, its sub-programs' "
  "calls among themselves in program order; bound again with them, so "
  "that its own derivative rules (a tangent or transposed solve) run them",
  __name__.rsplit(".", 1)[-1],
)


# The same rule as a custom batching or partitioning call's: one native
# call read from the lowering, its sub-programs bound again ordered.
register(LOWERED_WHOLE, ("custom_linear_solve", "composite"))(
  opaque.opaque_call
)
