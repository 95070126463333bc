"""Writes the optimized HLO of one jitted mpi4jax program, one file per MPI
rank: ``mpi4jax_rank{R}_of_{N}.txt`` in the folder given as argument.

Not a test. Needs mpi4jax (0.9.1 was used) and an MPI; run it as
``python make_mpi4jax_module.py OUT`` or ``mpirun -n 2 python ... OUT``.
"""

import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp

mpi4jax = importlib.import_module("mpi4jax")
MPI = importlib.import_module("mpi4py.MPI")


def program(x):
  """Five mpi4jax calls in a row. Only mpi4jax's ordered effect (a token
  from each call to the next) orders most of them: the broadcast and the
  last reduction do not read the results of the calls before them."""
  comm = MPI.COMM_WORLD
  rank, size = comm.Get_rank(), comm.Get_size()
  total = mpi4jax.allreduce(x, op=MPI.SUM)
  sent = mpi4jax.bcast(2 * x, root=0)
  passed = mpi4jax.sendrecv(
    total,
    jnp.zeros_like(total),
    source=(rank - 1) % size,
    dest=(rank + 1) % size,
  )
  mpi4jax.barrier()
  largest = mpi4jax.allreduce(jnp.sin(x), op=MPI.MAX)
  return total, sent, passed, largest


def main(out: pathlib.Path) -> None:
  comm = MPI.COMM_WORLD
  rank, size = comm.Get_rank(), comm.Get_size()
  x = jnp.arange(4, dtype=jnp.float32)
  compiled = jax.jit(program).lower(x).compile()
  text = compiled.as_text()
  assert text is not None, "the compiled program has no module text"
  out.mkdir(parents=True, exist_ok=True)
  (out / f"mpi4jax_rank{rank}_of_{size}.txt").write_text(text)
  print(rank, size, [a.tolist() for a in compiled(x + rank)])


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
