"""Tools for testing code that uses `entangle`.

* ``write_slot``, ``read_slot``, ``reset_slots``: a tiny mutable native
  resource, for reproducing ordering hazards in your own tests.
"""

from entangle_jax._example_resource import (
  NUM_SLOTS,
  read_slot,
  reset_slots,
  slot_values,
  write_slot,
)

__all__ = [
  "NUM_SLOTS",
  "read_slot",
  "reset_slots",
  "slot_values",
  "write_slot",
]
