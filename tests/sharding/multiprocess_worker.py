"""One process of multiprocess_test: 4 CPU devices of an 8-device mesh.

Usage: multiprocess_worker.py PROCESS_ID COORDINATOR_PORT
Each device runs write -> read -> write on its own slot of the process's
example resource, ordered by entangle; the process checks its shards' values
and the order in the module it compiled. First, a plain sharded `jit` of
entangle over both processes must add no collective and keep the sharding.
"""

import sys

import jax

jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

import re  # noqa: E402

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from entangle_jax import entangle, testing  # noqa: E402
from entangle_jax.demo import _hazard  # noqa: E402
from entangle_jax.demo._hazard import Ordering  # noqa: E402

RUNS = 50
_COLLECTIVE = re.compile(
  r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
)


def check_sharded_jit(payload, witness) -> None:
  """entangle under jit across both processes: no collective, sharding kept."""
  fn = jax.jit(lambda p, w: entangle(p, w))
  text = testing.module_text(fn.lower(payload, witness).compile())
  assert not _COLLECTIVE.search(text), text
  out = fn(payload, witness)
  assert out.sharding.is_equivalent_to(payload.sharding, payload.ndim)
  for shard, expected in zip(
    out.addressable_shards, payload.addressable_shards, strict=True
  ):
    np.testing.assert_array_equal(shard.data, expected.data)


def main(process_id: int, port: str) -> None:
  jax.distributed.initialize(
    f"127.0.0.1:{port}",
    num_processes=2,
    process_id=process_id,
    initialization_timeout=60,
  )
  assert jax.device_count() == 8 and jax.local_device_count() == 4
  mesh = jax.make_mesh((8,), ("x",))
  sharded = NamedSharding(mesh, P("x"))
  slots = jax.make_array_from_callback(
    (8,), sharded, lambda index: np.arange(8, dtype=np.int32)[index]
  )
  delay_input = jax.make_array_from_callback(
    (8, 50_000), sharded, lambda index: np.ones((8, 50_000), np.float32)[index]
  )

  check_sharded_jit(slots, delay_input)

  def compile_hazard(ordering):
    fn = jax.shard_map(
      _hazard.program(ordering),
      mesh=mesh,
      in_specs=(P("x"), P("x")),
      out_specs=P("x"),
    )
    return jax.jit(fn), jax.jit(fn).lower(slots, delay_input).compile()

  _, unordered = compile_hazard(Ordering.NONE)
  assert not testing.happens_before(unordered, "read", "second_write")
  fn, compiled = compile_hazard(Ordering.ENTANGLE)
  assert testing.happens_before(compiled, "read", "second_write")
  for _ in range(RUNS):
    out = fn(slots, delay_input)
    for shard in out.addressable_shards:
      value = np.asarray(shard.data)
      assert (value == _hazard.EXPECTED).all(), f"shard {shard.index}: {value}"
  print(
    f"process {process_id}: ordered and correct on "
    f"{len(out.addressable_shards)} devices"
  )
  jax.distributed.shutdown()


if __name__ == "__main__":
  main(int(sys.argv[1]), sys.argv[2])
