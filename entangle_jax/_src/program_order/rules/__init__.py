"""The ordering rules of `in_program_order`, one module per family of
primitives (`registry` holds the table; importing this package fills it).

To teach `in_program_order` a primitive, write its rule in its family's
module (or a new one imported here) with `registry.register`; the list of
what is supported (`registry.supported`, on docs/fixing_races.md) follows.
"""

from entangle_jax._src.program_order.rules import (
  checkpoint,
  conditionals,
  custom_derivatives,
  first_order,
  host_callbacks,
  loops,
  lowered_whole,
  maps,
  opaque,
  registry,
)

__all__ = [
  "checkpoint",
  "conditionals",
  "custom_derivatives",
  "first_order",
  "host_callbacks",
  "loops",
  "lowered_whole",
  "maps",
  "opaque",
  "registry",
]
