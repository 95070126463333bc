"""The example store's target names, and what they touch, as data: the
analysis knows them without loading the store's extension (the race check
over a dump runs in a process that never loads it)."""

WRITE_SLOT_TARGET = "entangle_jax_write_slot"
READ_SLOT_TARGET = "entangle_jax_read_slot"

DECLARATIONS = {
  # Each call touches the slots its first operand names, and a write
  # returns that slot id as the token for the next call. Distinct
  # constants name distinct slots; the elements of one slot array may
  # repeat a slot, so they are not declared distinct. The store is one
  # table in host memory for every CPU device (on CUDA, one per device; the
  # declaration describes the CPU store).
  "targets": {
    WRITE_SLOT_TARGET: {
      "mode": "write",
      "object": 0,
      "returns_object": [0],
      "devices": "shared",
    },
    READ_SLOT_TARGET: {"mode": "read", "object": 0, "devices": "shared"},
  }
}
"""In the form of a ``[tool.entangle-jax]`` table."""
