"""One process of across_ranks_distributed_test: rank PROCESS_ID of two
under jax.distributed (gloo over loopback), one CPU device each.

Usage: across_ranks_worker.py PROCESS_ID COORDINATOR_PORT OUT

Compiles three programs over the two processes' devices, with the rank as
a Python value, and writes each module to OUT/SHAPE/rankR.txt:

* ``ordered``: psum, then all_gather of a value entangled with the psum;
* ``swapped``: the same, but rank 1 makes all_gather first;
* ``unordered``: rank 0 works first, then psum and all_gather that
  nothing orders;
* ``unordered_ipo``: ``unordered`` under ``in_program_order``, which
  orders the all_gather after the psum in each process.

Only ``ordered`` and ``unordered_ipo`` run (the run-time control: they
finish, with the right values); the others would hang. A watchdog ends
the process if anything does.

With jaxlib 0.12.1 and later, XLA's collectives meet only between
processes that run the same module (`same_module`), and the two ranks'
``unordered_ipo`` modules differ (rank 0 works first): there it is run in
a thread for HANG_S seconds, to see it hang as the check says, and the
process then exits at once (its collectives never return).
"""

import faulthandler
import functools
import os
import pathlib
import sys
import threading
import time

import jax

jax.config.update("jax_num_cpu_devices", 1)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from entangle_jax import entangle, in_program_order  # noqa: E402
from entangle_jax.testing._analysis import same_module  # noqa: E402

WATCHDOG_S = 150
HANG_S = 10


def program(rank, shape, mesh, x):
  def body(x):
    if shape == "unordered" and rank == 0:
      x = jnp.sin(x) * 2.0 + x  # rank 0 works first
    swap = shape == "swapped" and rank == 1
    if swap:
      b = jax.lax.all_gather(x, "x")
      a = jax.lax.psum(entangle(jnp.cos(x), b), "x")
    else:
      a = jax.lax.psum(x, "x")
      y = jnp.cos(x) if shape == "unordered" else entangle(jnp.cos(x), a)
      b = jax.lax.all_gather(y, "x")
    return a.sum() + b.sum()

  shard = jax.shard_map(
    body, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False
  )
  return shard(x)


def hang(compiled, x, rank: int, out: pathlib.Path) -> None:
  """Runs `compiled` in a thread, sees it still running after HANG_S
  seconds, and exits once the other process has seen the same: each says
  so with a file in `out`. Rank 1 leaves first, since rank 0 holds the
  coordination service, whose end aborts every other process."""
  outcome = []
  run = threading.Thread(
    target=lambda: outcome.append(compiled(x)), daemon=True
  )
  run.start()
  run.join(HANG_S)
  assert run.is_alive(), f"different modules met in a collective: {outcome}"
  print(f"process {rank}: unordered_ipo hung, its modules differing")
  sys.stdout.flush()
  (out / f"hung{rank}").touch()
  wait_for = out / ("hung0" if rank == 1 else "leaving1")
  while not wait_for.exists():
    time.sleep(0.1)
  if rank == 1:
    (out / "leaving1").touch()
  else:
    time.sleep(1.0)  # Rank 1's os._exit, before the service ends.
  os._exit(0)


def main() -> None:
  faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
  rank, port, out = int(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
  jax.distributed.initialize(
    f"127.0.0.1:{port}", num_processes=2, process_id=rank
  )
  mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  sharding = NamedSharding(mesh, P("x"))
  x = jax.make_array_from_callback(
    (4,), sharding, lambda index: np.arange(4, dtype=np.float32)[index]
  )
  for shape in ("ordered", "swapped", "unordered", "unordered_ipo"):
    if shape == "unordered_ipo":
      f = in_program_order(functools.partial(program, rank, "unordered", mesh))
    else:
      f = functools.partial(program, rank, shape, mesh)
    compiled = jax.jit(f).lower(x).compile()
    text = compiled.as_text()
    assert text is not None, "the compiled program has no module text"
    (out / shape).mkdir(parents=True, exist_ok=True)
    (out / shape / f"rank{rank}.txt").write_text(text)
    if shape == "ordered":
      value = float(compiled(x))
      # psum: [0+2, 1+3] summed = 6; all_gather of cos over all 4 values.
      expected = 6.0 + float(np.cos(np.arange(4, dtype=np.float32)).sum())
      assert abs(value - expected) < 1e-4, (value, expected)
    if shape == "unordered_ipo" and same_module.collectives_need_same_module():
      hang(compiled, x, rank, out)
    if shape == "unordered_ipo":
      value = float(compiled(x))
      # Rank 0's shard [0, 1] became sin(v) * 2 + v; rank 1's is [2, 3].
      v = np.arange(4, dtype=np.float32)
      v[:2] = np.sin(v[:2]) * 2.0 + v[:2]
      expected = float(v.sum() + np.cos(v).sum())
      assert abs(value - expected) < 1e-4, (value, expected)
  print(f"process {rank}: compiled 4, ran ordered and unordered_ipo")
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
