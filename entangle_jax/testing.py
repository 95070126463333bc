"""Tools for testing code that uses `entangle`.

Proving order on the module XLA runs:

* ``happens_before(compiled, before, after)``: is every op ``before`` selects
  ordered before every op ``after`` selects by dependency edges?
* ``races(compiled, among=None)``: pairs of ops ordered neither way.
* ``OrderAnalysis``: the same questions, parsing the module once.
* ``module_text(compiled)``: the optimized HLO text that they analyse.
* ``order_graph(compiled, among=None, format="dot")``: the whole picture, as
  Graphviz DOT or Mermaid text.

A tiny mutable native resource, for reproducing ordering hazards:

* ``write_slot``, ``read_slot``, ``reset_slots``, ``slot_values``,
  ``NUM_SLOTS``.
"""

from entangle_jax._example_resource import (
  NUM_SLOTS,
  has_cuda_device,
  read_slot,
  reset_slots,
  slot_values,
  write_slot,
)
from entangle_jax._hlo_order import (
  OrderAnalysis,
  happens_before,
  module_text,
  races,
)
from entangle_jax._order_graph import order_graph

__all__ = [
  "NUM_SLOTS",
  "OrderAnalysis",
  "happens_before",
  "has_cuda_device",
  "module_text",
  "order_graph",
  "races",
  "read_slot",
  "reset_slots",
  "slot_values",
  "write_slot",
]
