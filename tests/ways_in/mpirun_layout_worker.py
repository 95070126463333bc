"""One rank of mpirun_test's communicator-layout control, under
``mpirun -n 2``.

Usage: ``mpirun -n 2 python mpirun_layout_worker.py OUT PROGRAM``

PROGRAM is an mpi4jax ``sendrecv`` of ``x = arange(4) + rank`` with "the
other rank" (``1 - rank``), on a communicator that spans both ranks:

* ``world``: ``COMM_WORLD``'s clone, which numbers the ranks as the world
  does: each rank receives the other's ``x``;
* ``reversed``: ``COMM_WORLD.Split(0, size - 1 - rank)``, which numbers
  them the other way round, so "the other rank" is the rank itself: each
  rank receives its own ``x``;
* ``reversed_numbered``: the same communicator, "the other rank" being
  ``1 - comm.Get_rank()``, its own numbering: each rank receives the
  other's ``x``.

Both compile to the same module on each rank (the handle aside). The
rank dumps its modules to ``OUT/PROGRAM/rankR`` (``XLA_FLAGS``) and runs
the program under ``record_executions`` there, then writes its result as
a JSON list (``OUT/PROGRAM/rankR.json``). A watchdog ends the rank, with
every thread's stack on stderr, after `WATCHDOG_S`. Needs mpi4jax and an
MPI; not a test.
"""

import faulthandler
import importlib
import json
import os
import pathlib
import sys

# Imported by name, so that the type checker, which runs where mpi4jax is
# not installed, does not look for them.
MPI = importlib.import_module("mpi4py.MPI")

WATCHDOG_S = 60

rank = MPI.COMM_WORLD.Get_rank()
out = pathlib.Path(sys.argv[1]) / sys.argv[2]
folder = out / f"rank{rank}"
# Before JAX starts: XLA reads its flags once.
os.environ["XLA_FLAGS"] = f"--xla_dump_to={folder} --xla_dump_hlo_as_text"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from entangle_jax.testing import record_executions  # noqa: E402

mpi4jax = importlib.import_module("mpi4jax")


def communicator(name: str):
  size = MPI.COMM_WORLD.Get_size()
  if name == "world":
    return MPI.COMM_WORLD.Clone()
  if name in ("reversed", "reversed_numbered"):
    return MPI.COMM_WORLD.Split(0, size - 1 - rank)
  raise SystemExit(f"no program {name!r}")


def main() -> None:
  faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
  comm = communicator(sys.argv[2])
  mine = comm.Get_rank() if sys.argv[2] == "reversed_numbered" else rank
  other = 1 - mine

  @jax.jit
  def exchange(x):
    return mpi4jax.sendrecv(x, x, source=other, dest=other, comm=comm)

  x = jnp.arange(4, dtype=jnp.float32) + rank
  with record_executions(folder):
    got = exchange(x).tolist()
  (out / f"rank{rank}.json").write_text(json.dumps(got))
  print(f"rank {rank} ran {sys.argv[2]}", flush=True)
  faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
  main()
