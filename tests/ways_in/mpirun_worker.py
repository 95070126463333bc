"""One rank of mpirun_test's run-time control, under ``mpirun -n 2`` (or
``-n 3``).

Usage: ``mpirun -n N python mpirun_worker.py OUT PROGRAM...``

Each PROGRAM is two mpi4jax allreduces of ``x = arange(4) + rank``:

* ``same_order``: ``allreduce(x)``, then ``allreduce(tile(x, 2))``, on
  both ranks;
* ``swapped``: the same, but the last rank (rank 1 of 2, rank 2 of 3)
  makes them in the other Python order, so its first allreduce meets the
  others' first, of another size (Open MPI aborts with
  ``MPI_ERR_TRUNCATE``);
* ``swapped_same_size``: ``allreduce(x)`` and ``allreduce(10 * x)``,
  the last rank in the other order: the sizes agree, so MPI sums each
  rank's first operand with the last rank's second, and both results are
  wrong on every rank.

For each, in the order given, each rank writes the optimized module it
compiled, as an XLA dump names it
(``OUT/PROGRAM/rankR/module_0001.jit_PROGRAM.cpu_after_optimizations.txt``),
then runs it and writes its two results as JSON lists
(``OUT/PROGRAM/rankR.json``). A watchdog ends the rank, with every
thread's stack on stderr, if it runs past `WATCHDOG_S` (a hang in MPI).
Needs mpi4jax and an MPI; not a test.
"""

import faulthandler
import importlib
import json
import pathlib
import sys

import jax
import jax.numpy as jnp

# Imported by name, so that the type checker, which runs where mpi4jax is
# not installed, does not look for them.
mpi4jax = importlib.import_module("mpi4jax")
MPI = importlib.import_module("mpi4py.MPI")

WATCHDOG_S = 60

rank = MPI.COMM_WORLD.Get_rank()
last = MPI.COMM_WORLD.Get_size() - 1


def program(name: str):
  """The function PROGRAM names, as this rank compiles it."""
  same_size = name == "swapped_same_size"
  swap = name != "same_order" and rank == last

  def f(x):
    y = x * 10.0 if same_size else jnp.tile(x, 2)
    if swap:  # the last rank took another Python path
      b = mpi4jax.allreduce(y, op=MPI.SUM)
      a = mpi4jax.allreduce(x, op=MPI.SUM)
    else:
      a = mpi4jax.allreduce(x, op=MPI.SUM)
      b = mpi4jax.allreduce(y, op=MPI.SUM)
    return a, b

  return f


def main() -> None:
  faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
  out = pathlib.Path(sys.argv[1])
  x = jnp.arange(4, dtype=jnp.float32) + rank
  for name in sys.argv[2:]:
    compiled = jax.jit(program(name)).lower(x).compile()
    folder = out / name / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    text = compiled.as_text()
    assert text is not None, "the compiled program has no module text"
    dump = f"module_0001.jit_{name}.cpu_after_optimizations.txt"
    (folder / dump).write_text(text)
    a, b = compiled(x)
    results = [a.tolist(), b.tolist()]
    (out / name / f"rank{rank}.json").write_text(json.dumps(results))
    print(f"rank {rank} ran {name}", flush=True)
  faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
  main()
