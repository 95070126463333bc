"""Whether each ordering survives ``jax.vmap`` and ``jax.export``.

An ordering a binding cannot batch or serialize is a cost its users pay
later, so the table says it, tried on the installed jax rather than taken
from JAX's documentation: the hazard (no delay) under ``jit(vmap)`` on
three slots, compiled and run; and the jitted hazard exported and
serialized, with the safety checks of the custom calls it uses switched
off as a user would (the store's targets, entangle's, ``control_dep``'s).
A refusal is the error JAX raises, kept as its first line.

Only the errors JAX raises for a refused transformation are caught, so a
broken setup (no flatbuffers for serializing, say) fails loudly instead
of reading as a refusal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from benchmarks.orderings import Ordering
from entangle_jax import export_safety_checks
from entangle_jax.testing import example_store

REFUSALS = (NotImplementedError, ValueError, TypeError)
"""What JAX raises for an ordering it cannot transform (jax 0.6.2 to
0.12: ``ffi_call`` without a ``vmap_method``, ordered callbacks under
vmap, host callbacks in a serialized module)."""
OTHER_TARGETS = (
  example_store.WRITE_SLOT_TARGET,
  example_store.READ_SLOT_TARGET,
  "control_dep",
)


def vmap_refusal(ordering: Ordering) -> str | None:
  """Why ``jit(vmap)`` of the hazard fails, or None when it runs."""

  def hazard(slot):
    return ordering.hazard(slot, 0)[0]

  try:
    jax.block_until_ready(
      jax.jit(jax.vmap(hazard))(jnp.arange(3, dtype=jnp.int32))
    )
  except REFUSALS as refused:
    return _first_line(refused)
  return None


def export_refusal(ordering: Ordering) -> str | None:
  """Why exporting and serializing the hazard fails, or None."""

  def hazard(slot):
    return ordering.hazard(slot, 0)[0]

  checks = export_safety_checks() + [
    jax.export.DisabledSafetyCheck.custom_call(t) for t in OTHER_TARGETS
  ]
  try:
    export = jax.export.export(jax.jit(hazard), disabled_checks=checks)
    export(jnp.int32(0)).serialize()
  except REFUSALS as refused:
    return _first_line(refused)
  return None


def _first_line(error: Exception) -> str:
  lines = str(error).strip().splitlines()
  return f"{type(error).__name__}: {lines[0] if lines else ''}"
