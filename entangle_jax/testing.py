"""Tools for testing code that uses `entangle`.

Proving order on the module XLA runs:

* ``happens_before(compiled, before, after)``: is every op ``before`` selects
  ordered before every op ``after`` selects by edges the runtime honours?
* ``assert_happens_before(compiled, before, after)``: the same, raising an
  ``AssertionError`` that names each unordered pair and the usual fix.
* ``races(compiled, among=None)``: pairs of ops ordered neither way;
  ``format_races`` renders them like ``assert_happens_before`` does.
* ``OrderAnalysis``: the same questions, parsing the module once; ``Op`` and
  ``Race`` are what it returns.
* ``is_effectful`` / ``is_user_native_call``: which ops a named-scope
  selector picks, and which ``races`` considers by default.
* ``module_text(compiled)``: the optimized HLO text that they analyse.
* ``order_graph(compiled, among=None, format="dot")``: the whole picture, as
  Graphviz DOT or Mermaid text.

A tiny mutable native resource, for reproducing ordering hazards:

* ``write_slot``, ``read_slot``, ``reset_slots``, ``slot_values``,
  ``NUM_SLOTS``.
* ``call_log``: the order in which its host calls actually ran.
"""

from entangle_jax._example_resource import (
  NUM_SLOTS,
  CallRecord,
  call_log,
  has_cuda_device,
  read_slot,
  reset_slots,
  slot_values,
  write_slot,
)
from entangle_jax._hlo_order import (
  Op,
  OrderAnalysis,
  Race,
  assert_happens_before,
  format_races,
  happens_before,
  is_effectful,
  is_user_native_call,
  module_text,
  races,
)
from entangle_jax._order_graph import order_graph

__all__ = [
  "NUM_SLOTS",
  "CallRecord",
  "Op",
  "OrderAnalysis",
  "Race",
  "assert_happens_before",
  "call_log",
  "format_races",
  "happens_before",
  "has_cuda_device",
  "is_effectful",
  "is_user_native_call",
  "module_text",
  "order_graph",
  "races",
  "read_slot",
  "reset_slots",
  "slot_values",
  "write_slot",
]
