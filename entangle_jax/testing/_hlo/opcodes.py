"""The sets of opcodes that the stages share, each written once here.

How each construct is ordered, and how object identity follows a value
through it, is the rule table's (`entangle_jax.testing._order.rules`); the
sets here say what a selector may pick (`entangle_jax.testing._analysis
.selectors`).
"""

from __future__ import annotations

EFFECTFUL_OPCODES = frozenset(
  {
    "send",
    "send-done",
    "recv",
    "recv-done",
    "infeed",
    "outfeed",
    "all-reduce",
    "all-reduce-start",
    "all-reduce-done",
    "all-gather",
    "all-gather-start",
    "all-gather-done",
    "all-to-all",
    "ragged-all-to-all",
    "reduce-scatter",
    "collective-broadcast",
    "collective-permute",
    "collective-permute-start",
    "collective-permute-done",
    "rng",
    "rng-get-and-update-state",
  }
)
"""Opcodes with effects beyond their result: communication, I/O, state."""

BOOKKEEPING = frozenset(
  {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
)
"""Opcodes that carry metadata but are bookkeeping, never selected."""
