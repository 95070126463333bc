"""Compiles issue 70's shapes with mpi4jax, one optimized module per rank,
as an XLA dump would name it: ``OUT/SHAPE/rankR/module_0001.jit_SHAPE.
cpu_after_optimizations.txt``. Compiled only, never run.

Not a test. Needs mpi4jax (0.9.1 was used) and an MPI; run it as
``mpirun -n 2 python make_modules.py OUT`` (README.md).
"""

import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp

mpi4jax = importlib.import_module("mpi4jax")
MPI = importlib.import_module("mpi4py.MPI")

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = pathlib.Path(sys.argv[1])


def same_order(x):
  a = mpi4jax.allreduce(x, op=MPI.SUM)
  b = mpi4jax.allreduce(jnp.tile(x, 2), op=MPI.SUM)
  return a, b


def swapped(x):
  if rank == 1:
    b = mpi4jax.allreduce(jnp.tile(x, 2), op=MPI.SUM)
    a = mpi4jax.allreduce(x, op=MPI.SUM)
  else:
    a = mpi4jax.allreduce(x, op=MPI.SUM)
    b = mpi4jax.allreduce(jnp.tile(x, 2), op=MPI.SUM)
  return a, b


def sizes(x):
  return mpi4jax.allreduce(jnp.tile(x, 1 + rank), op=MPI.SUM)


def cond_local(x):
  return jax.lax.cond(
    x.sum() > 0, lambda v: mpi4jax.allreduce(v, op=MPI.SUM), lambda v: v, x
  )


def cond_reduced(x):
  d = mpi4jax.allreduce(x.sum(), op=MPI.SUM)
  return jax.lax.cond(
    d > 0, lambda v: mpi4jax.allreduce(v, op=MPI.SUM), lambda v: v, x
  )


def while_local(x):
  def body(c):
    x, _ = c
    x = mpi4jax.allreduce(x, op=MPI.SUM) * 0.1 + x * 0.0
    return x, jnp.abs(x - c[0]).sum()

  return jax.lax.while_loop(
    lambda c: c[1] > 1e-3, body, (x, jnp.float32(jnp.inf))
  )


def while_reduced(x):
  def body(c):
    x, _ = c
    y = mpi4jax.allreduce(x, op=MPI.SUM) * 0.1
    r = mpi4jax.allreduce(jnp.abs(y - x).sum(), op=MPI.SUM)
    return y, r

  return jax.lax.while_loop(
    lambda c: c[1] > 1e-3, body, (x, jnp.float32(jnp.inf))
  )


def sendrecv_deadlock(x):
  other = 1 - rank
  mpi4jax.send(x, dest=other)
  return mpi4jax.recv(x, source=other)


def sendrecv_ok(x):
  other = 1 - rank
  if rank == 0:
    mpi4jax.send(x, dest=other)
    return mpi4jax.recv(x, source=other)
  y = mpi4jax.recv(x, source=other)
  mpi4jax.send(y, dest=other)
  return y


def sendrecv_any_source(x):
  # Rank 1 takes its message from whichever rank sends: rank 0.
  other = 1 - rank
  source = other if rank == 0 else MPI.ANY_SOURCE
  return mpi4jax.sendrecv(x, x, source=source, dest=other)


def sendrecv_any_source_unmet(x):
  # Rank 0 only receives: rank 1's receive from any source meets no send.
  if rank == 0:
    return mpi4jax.recv(x, source=1)
  return mpi4jax.sendrecv(x, x, source=MPI.ANY_SOURCE, dest=0)


def bcast_roots(x):
  return mpi4jax.bcast(x, root=rank)


def bcast_ok(x):
  return mpi4jax.bcast(x, root=0)


def reductions_differ(x):
  return mpi4jax.allreduce(x, op=MPI.SUM if rank == 0 else MPI.MAX)


def reductions_same(x):
  return mpi4jax.allreduce(x, op=MPI.MAX)


SHAPES = [
  same_order,
  swapped,
  sizes,
  cond_local,
  cond_reduced,
  while_local,
  while_reduced,
  sendrecv_deadlock,
  sendrecv_ok,
  sendrecv_any_source,
  sendrecv_any_source_unmet,
  bcast_roots,
  bcast_ok,
  reductions_differ,
  reductions_same,
]

x = jnp.arange(4, dtype=jnp.float32)
for f in SHAPES:
  d = out / f.__name__ / f"rank{rank}"
  d.mkdir(parents=True, exist_ok=True)
  text = jax.jit(f).lower(x).compile().as_text()
  assert text is not None, "the compiled program has no module text"
  name = f"module_0001.jit_{f.__name__}.cpu_after_optimizations.txt"
  (d / name).write_text(text)
print("rank", rank, "done")
