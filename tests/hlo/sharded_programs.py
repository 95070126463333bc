"""A hazard in a `shard_map` on a slot array split over two devices, its
targets declaring distinct elements distinct: each device has its own
slots, so its calls race only on its own device (1 pair), never across
devices. Run as a script (``XLA_FLAGS=--xla_dump_to=DIR
--xla_dump_hlo_as_text``), it compiles the program once, so that XLA dumps
it; tests/hlo/entry_shardings_test.py reads such a dump from jax 0.12.0.1
(tests/hlo/data/entry_shardings/), whose optimized module prints no
sharding on its entry parameters.
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from entangle_jax._src import native
from entangle_jax._src.targets.declaration import TargetDeclaration
from entangle_jax.testing import example_store

WRITE = "entry_shardings_write"
READ = "entry_shardings_read"
DECLARATIONS = (
  TargetDeclaration(
    WRITE, "write", object=0, returns_object=(0,), distinct_elements=True
  ),
  TargetDeclaration(READ, "read", object=0, distinct_elements=True),
)
"""What the targets do: the check's `Declarations` are built from these."""

native.register_handlers(
  example_store._native, {"write_slot": WRITE, "read_slot": READ}, ["cpu"]
)
_write = jax.ffi.ffi_call(
  WRITE, jax.ShapeDtypeStruct((1,), jnp.int32), has_side_effect=True
)
_read = jax.ffi.ffi_call(READ, jax.ShapeDtypeStruct((1,), jnp.float32))


SPLIT = P("x")
"""The slot array split over the two devices."""


def hazard(slots, spec=SPLIT):
  """Write 1, read, write 2 on each device's slots; `spec` splits the slot
  array over the devices (``P("x")``) or not (``P()``)."""
  mesh = jax.make_mesh((2,), ("x",))

  def body(s):
    token = _write(s, jnp.ones(s.shape))
    x = _read(token)
    _write(token, jnp.full(s.shape, 2.0))
    return x

  return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)(slots)


def split_slots(spec=SPLIT):
  """Slots 11 and 12, placed by `spec` on a two-device mesh."""
  mesh = jax.make_mesh((2,), ("x",))
  n = 2 if spec == SPLIT else 1
  slots = jnp.arange(11, 11 + n, dtype=jnp.int32)
  return jax.device_put(slots, NamedSharding(mesh, spec))


if __name__ == "__main__":
  jax.config.update("jax_num_cpu_devices", 2)
  jax.jit(hazard).lower(split_slots()).compile()
