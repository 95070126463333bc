"""The call-like primitives: a nested function that XLA inlines, so its
results depend on its inputs as its body's do. One list, read by the rule
that inlines them (`rules.maps`, `rules.checkpoint`) and by what XLA keeps
of their data flow (`dependence`), so the two cannot drift apart."""

from __future__ import annotations

NESTED_CALLS = ("pjit", "jit", "closed_call", "core_call")
"""A nested ``jax.jit`` and its older names, and ``jax.named_call``'s
(``core_call``/``closed_call``)."""

CHECKPOINTS = ("checkpoint", "remat", "remat2")
"""``jax.checkpoint`` (``jax.remat``), under each name JAX gave it."""

INLINED = NESTED_CALLS + CHECKPOINTS
"""Every call-like primitive."""
