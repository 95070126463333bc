"""A generated corpus of small mpi4jax programs of 2 and 3 ranks, each run
under ``mpirun`` for its truth, and the cross-rank check's answer on each
rank's dumps (``python -m benchmarks.rank_corpus [--size 150] [--seed 0]``,
with mpi4jax, mpi4py and an ``mpirun`` installed; about 10 s a program).

A program is a few jitted calls run in sequence, each a few steps drawn
from a seed: allreduce (sum or max), bcast and reduce with a root,
sendrecv around a ring, a send and its receive with a tag, an exchange
of two ranks by send and receive, receives from ``ANY_SOURCE`` of every
other rank's send, an allreduce on a ``COMM_WORLD.Split`` communicator,
rank-local work (a Python branch on the rank, a ``lax.cond`` on the
rank's data, a ``fori_loop`` of ``1 + rank`` trips), and ``lax.cond``
and ``fori_loop`` around such steps. Operands are ``f32`` or ``i32`` of
2048 or 4096 elements (past Open MPI's eager limit of 4 KiB in shared
memory: a send waits for its receive, as MPI allows it to), and some
steps add a constant that differs per rank.

Odd seeds then break the program on one rank (the *victim*) or on all,
where a site fits (`MUTATIONS`): two steps swapped, a step dropped, a
loop's trips, a decision made on each rank's own data or on a constant
of the victim's, an operand's size or type, a root, a tag, a peer, a
reduction, the order of the jitted calls, both ranks of an exchange
sending first, one receive from any rank too many. Even seeds stay as
drawn: correct by construction.

The truth is the run: each rank compiles every call first (its dumps are
then complete whatever happens), runs them under `record_executions`,
and a watchdog ends a rank whose run goes past `WATCHDOG_S`: a *hang*.
A launch that fails otherwise is an *abort* (``MPI_ERR_TRUNCATE``...).
A run that ends is *right* where every rank's every step gives the value
the unbroken program means (`expected`: numpy, each call meeting its
counterpart), else *wrong*.

The check runs twice on each program's dumps: ``--ranks`` on the folders
as the run left them (a rank that hung or aborted leaves its execution
record incomplete, so that answers "cannot answer"), and ``--ranks`` on
the same modules with the record the rank meant to write (its calls in
its order, and its communicators' layouts: `planned_records`), which is
what the analysis says of the modules. The counts (`Counts.table`):
``proved but hangs/aborts/wrong`` must be 0; ``false reports`` are
reported programs of even seeds (correct by construction) that ran
right.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

WATCHDOG_S = 15
"""A rank's run of its calls past this is a hang (the ranks compile every
call first, so it is the calls' run only)."""
LAUNCH_S = 120
"""The whole launch past this is a hang too (a rank stuck in MPI_Init or
MPI_Finalize)."""
SIZES = (2048, 4096)
TAG_ANY = 7
"""The tag of the receives from any rank."""
SUMMARY = 8
"""Each step gives its first 4 elements and the last 4 of the smaller
size, as ``f32``."""

MUTATIONS = (
  "swap",
  "drop",
  "trips",
  "local_pred",
  "pred_const",
  "size",
  "dtype",
  "root",
  "tag",
  "peer",
  "op",
  "order_calls",
  "unsafe",
  "extra_any",
  "reduce_pred",
  "recv_order",
  "swap_inner",
  "repeat",
)
"""What an odd seed may break (`_mutate`)."""

_COMM_KINDS = (
  "allreduce",
  "bcast",
  "reduce",
  "sendrecv",
  "p2p",
  "exchange",
  "gather_any",
  "split",
  "pair",
)


@dataclasses.dataclass(frozen=True)
class Program:
  """One generated program: `calls` as drawn (each a tuple of steps, as
  nested tuples whose first item is the kind), and what breaks it."""

  seed: int
  nranks: int
  calls: tuple
  schedule: tuple
  """The calls' executions, in order, by number: each call once, and
  one of them perhaps again (one jitted function run twice)."""
  mutation: tuple | None = None
  """``(kind, call, step, victim)``, or None: correct by construction."""

  def rank_calls(self, rank: int) -> tuple:
    """What rank `rank` runs: each call's ``(name, steps)``, in the order
    of its executions, with repeats."""
    calls = [(f"call{k}", steps) for k, steps in enumerate(self.calls)]
    if self.mutation is not None:
      calls = list(_mutate(self, calls, rank))
    by_name = dict(calls)
    order = [f"call{k}" for k in self.schedule]
    if self.mutation is not None and rank == self.mutation[3]:
      kind, c = self.mutation[:2]
      if kind == "order_calls":
        order.reverse()
      elif kind == "repeat":  # One more execution of a talking call.
        order.insert(order.index(f"call{c}"), f"call{c}")
    return tuple((name, by_name[name]) for name in order)

  def describe(self) -> str:
    return (
      f"seed {self.seed} ({self.nranks} ranks, "
      f"{self.mutation or 'correct'}, runs {self.schedule}): {self.calls}"
    )


# The drawing.


def generate(seed: int) -> Program:
  """The program of `seed`: correct by construction for even seeds, one
  mutation for odd ones where a site fits."""
  draw = random.Random(seed)
  nranks = draw.choice((2, 3))
  ids = iter(range(1000))
  calls = tuple(
    tuple(
      _draw_step(draw, nranks, ids, depth=0) for _ in range(draw.randint(1, 3))
    )
    for _ in range(draw.randint(1, 3))
  )
  schedule = list(range(len(calls)))
  if draw.random() < 0.3:
    again = draw.randrange(len(calls))
    schedule.insert(schedule.index(again), again)
  program = Program(seed, nranks, calls, tuple(schedule))
  if seed % 2 == 0:
    return program
  kinds = list(MUTATIONS)
  draw.shuffle(kinds)
  for kind in kinds:
    sites = _sites(program, kind)
    if sites:
      call, step = draw.choice(sites)
      victim = draw.randrange(nranks)
      return dataclasses.replace(program, mutation=(kind, call, step, victim))
  return program


def _draw_step(draw: random.Random, nranks: int, ids, depth: int) -> tuple:
  kinds = [*_COMM_KINDS, "allreduce", "sendrecv", "p2p", "local"]
  if depth == 0:
    kinds += ["cond", "cond", "loop", "loop"]
  else:  # Inside a cond or loop: the steps every rank makes alike.
    kinds = ["allreduce", "bcast", "sendrecv", "p2p", "local", "reduce", "pair"]
  kind = draw.choice(kinds)
  sid = next(ids)
  size = draw.choice(SIZES)
  dtype = "i32" if draw.random() < 0.2 else "f32"
  per_rank = draw.random() < 0.3
  peers = list(range(nranks))
  if kind == "allreduce":
    return (kind, sid, size, dtype, per_rank, draw.choice(("sum", "max")))
  if kind in ("bcast", "reduce"):
    return (kind, sid, size, dtype, per_rank, draw.randrange(nranks))
  if kind == "sendrecv":
    shift = draw.randrange(1, nranks)
    return (kind, sid, size, dtype, per_rank, shift, draw.randrange(4))
  if kind == "p2p":  # A tag of -1: the receive takes any tag.
    a, b = draw.sample(peers, 2)
    return (kind, sid, size, dtype, per_rank, a, b, draw.randrange(-1, 4))
  if kind == "exchange":
    a, b = draw.sample(peers, 2)
    return (kind, sid, size, dtype, per_rank, a, b, draw.randrange(4))
  if kind == "pair":  # Two sends, then their receives in their order.
    a, b = draw.sample(peers, 2)
    same_tag = draw.random() < 0.5
    return (
      kind,
      sid,
      size,
      dtype,
      per_rank,
      a,
      b,
      draw.randrange(4),
      same_tag,
      False,
    )
  if kind == "gather_any":
    return (kind, sid, size, dtype, per_rank, draw.randrange(nranks))
  if kind == "split":
    return (kind, sid, size, dtype, per_rank, draw.randrange(2))
  if kind == "local":
    how = draw.choice(("python", "cond", "loop"))
    return (kind, sid, size, dtype, per_rank, how)
  if kind == "cond":
    then = tuple(
      _draw_step(draw, nranks, ids, depth + 1)
      for _ in range(draw.randint(0, 2))
    )
    other = tuple(
      _draw_step(draw, nranks, ids, depth + 1)
      for _ in range(draw.randint(0, 2))
    )
    how = draw.choice(("shared", "bcast"))
    return (kind, sid, how, draw.random() < 0.5, then, other)
  inner = tuple(
    _draw_step(draw, nranks, ids, depth + 1) for _ in range(draw.randint(1, 3))
  )
  return ("loop", sid, draw.randint(1, 3), inner)


def communicates(step: tuple) -> bool:
  """Whether `step` makes a communicating call on some rank."""
  if step[0] in _COMM_KINDS:
    return True
  if step[0] == "cond":
    return True  # Its decision is an allreduce or a bcast.
  if step[0] == "loop":
    return any(communicates(s) for s in step[3])
  return False


def _branches_differ(step: tuple) -> bool:
  return any(communicates(s) for s in step[4] + step[5])


def _sites(program: Program, kind: str) -> list[tuple[int, int]]:
  """Where `kind` fits: ``(call, step)`` pairs."""
  found = []
  for c, steps in enumerate(program.calls):
    for i, step in enumerate(steps):
      if _fits(kind, step, steps[i + 1] if i + 1 < len(steps) else None):
        found.append((c, i))
  talking = [
    c for c, s in enumerate(program.calls) if any(map(communicates, s))
  ]
  if kind == "order_calls":
    return (
      [(0, 0)] if len(set(program.schedule)) > 1 and len(talking) > 1 else []
    )
  if kind == "repeat":
    return [(c, 0) for c in talking]
  return found


def _fits(kind: str, step: tuple, after: tuple | None) -> bool:
  name = step[0]
  if kind == "swap":
    return after is not None and communicates(step) and communicates(after)
  if kind == "drop":
    return communicates(step)
  if kind == "trips":
    return name == "loop" and communicates(step)
  if kind in ("local_pred", "pred_const", "reduce_pred"):
    return name == "cond" and _branches_differ(step)
  if kind == "recv_order":
    return name == "pair"
  if kind == "swap_inner":
    return (
      name == "loop" and len(step[3]) > 1 and all(map(communicates, step[3]))
    )
  if kind in ("size", "dtype"):
    return name in _COMM_KINDS and name != "gather_any"
  if kind == "root":
    return name in ("bcast", "reduce")
  if kind in ("tag", "peer"):
    return name in ("p2p", "sendrecv", "pair")
  if kind == "op":
    return name == "allreduce"
  if kind == "unsafe":
    return name == "exchange"
  if kind == "extra_any":
    return name == "gather_any"
  return False


def _mutate(program: Program, calls: list, rank: int) -> tuple:
  assert program.mutation is not None
  kind, c, i, victim = program.mutation
  n = program.nranks
  if kind in ("order_calls", "repeat"):
    return tuple(calls)  # In the order of executions (`rank_calls`).
  name, steps = calls[c]
  steps = list(steps)
  step = steps[i]
  if kind == "local_pred":
    # Every rank decides on its own data: the ranks from the victim on
    # take the other branch.
    steps[i] = (*step[:2], ("local", max(victim, 1)), *step[3:])
  elif kind == "reduce_pred":
    # Every rank decides on a reduce's result, which only its root holds.
    steps[i] = (*step[:2], ("reduce",), *step[3:])
  elif kind == "recv_order":  # The receiver takes the second first.
    steps[i] = (*step[:-1], True)
  elif kind == "unsafe":
    steps[i] = (*step[:-1], -1)  # A tag of -1 marks: both send first.
  elif rank != victim:
    return tuple(calls)
  elif kind == "swap":
    steps[i], steps[i + 1] = steps[i + 1], steps[i]
  elif kind == "swap_inner":
    inner = step[3]
    steps[i] = (*step[:3], (inner[1], inner[0], *inner[2:]))
  elif kind == "drop":
    del steps[i]
  elif kind == "trips":
    steps[i] = (*step[:2], step[2] + 1, step[3])
  elif kind == "pred_const":
    steps[i] = (*step[:3], not step[3], *step[4:])
  elif kind == "size":
    other = SIZES[1 - SIZES.index(step[2])]
    steps[i] = (step[0], step[1], other, *step[3:])
  elif kind == "dtype":
    steps[i] = (*step[:3], "i32" if step[3] == "f32" else "f32", *step[4:])
  elif kind == "root":
    steps[i] = (*step[:5], (step[5] + 1) % n)
  elif kind == "tag" and step[0] == "pair":
    steps[i] = (*step[:7], step[7] + 1, *step[8:])
  elif kind == "tag":
    steps[i] = (*step[:-1], step[-1] + 1)
  elif kind == "peer":
    if step[0] == "sendrecv":
      steps[i] = (*step[:5], 0 if step[5] != 0 else 1, step[6])
    else:  # Receive from the sender's other neighbour (or itself).
      steps[i] = (*step[:5], step[6], step[6], *step[7:])
  elif kind == "op":
    steps[i] = (*step[:5], "max" if step[5] == "sum" else "sum")
  elif kind == "extra_any":
    steps[i] = (*step, 1)
  calls = list(calls)
  calls[c] = (name, tuple(steps))
  return tuple(calls)


# The meaning: numpy, each call meeting its counterpart on every rank.


def rank_input(rank: int) -> np.ndarray:
  return (np.arange(max(SIZES)) % 7 + 10 * rank).astype(np.float32)


def _constant(step: tuple, rank: int) -> int:
  per_rank = step[4]
  return step[1] + 1 + (3 * rank if per_rank else 0)


def _operand(step: tuple, rank: int, trip: int = 0) -> np.ndarray:
  dtype = np.int32 if step[3] == "i32" else np.float32
  value = rank_input(rank)[: step[2]] + _constant(step, rank) + trip
  return value.astype(dtype)


def _summary(value: np.ndarray) -> np.ndarray:
  # The last 4 of the smaller size: a step whose size alone changed (on
  # a communicator of one rank) gives what it gave.
  end = min(SIZES)
  return np.concatenate([value[:4], value[end - 4 : end]]).astype(np.float32)


def split_groups(nranks: int, which: int) -> list[list[int]]:
  """The ranks of each communicator of split `which`: by parity, or rank 0
  alone."""
  if which == 0:
    return [[r for r in range(nranks) if r % 2 == p] for p in (0, 1)]
  return [[0], list(range(1, nranks))]


def _threshold(step: tuple) -> float:
  """What a cond's decision value is compared with: below every value
  where the cond takes its first branch (``step[3]``), above every value
  otherwise."""
  return -0.5 if step[3] else 10000.5


def _decision_value(step: tuple, rank: int, nranks: int) -> float:
  how = step[2]
  constant = step[1] + 1
  if how == "shared":
    return float(sum(10 * r + constant for r in range(nranks)))
  if how == "bcast":
    return float(constant)  # Rank 0's x[0] + constant.
  victim = how[1]  # ("local", victim): rank `victim` and later differ.
  return float(10 * (rank - victim) + 5)


def _expect_step(step: tuple, nranks: int, trip: int = 0) -> list[np.ndarray]:
  """`step`'s summary on each rank."""
  kind = step[0]
  if kind in ("cond", "loop"):
    return _expect_nested(step, nranks, trip)
  ops = [_operand(step, r, trip) for r in range(nranks)]
  if kind == "allreduce":
    reduce = np.maximum if step[5] == "max" else np.add
    total = ops[0]
    for o in ops[1:]:
      total = reduce(total, o)
    return [_summary(total)] * nranks
  if kind == "bcast":
    return [_summary(ops[step[5]])] * nranks
  if kind == "reduce":
    total = sum(ops[1:], ops[0])
    return [_summary(total if r == step[5] else ops[r]) for r in range(nranks)]
  if kind == "sendrecv":
    return [_summary(ops[(r - step[5]) % nranks]) for r in range(nranks)]
  if kind == "p2p":
    src, dst = step[5], step[6]
    return [_summary(ops[src] if r == dst else ops[r]) for r in range(nranks)]
  if kind == "pair":
    src, dst = step[5], step[6]
    both = ops[src] + 2 * (ops[src] * 3)
    return [_summary(both if r == dst else ops[r]) for r in range(nranks)]
  if kind == "exchange":
    a, b = step[5], step[6]
    other = {a: b, b: a}
    return [_summary(ops[other.get(r, r)]) for r in range(nranks)]
  if kind == "gather_any":
    dst = step[5]
    rest = [ops[r] for r in range(nranks) if r != dst]
    total = sum(rest[1:], rest[0])
    return [_summary(total if r == dst else ops[r]) for r in range(nranks)]
  if kind == "split":
    out = []
    for r in range(nranks):
      (group,) = [g for g in split_groups(nranks, step[5]) if r in g]
      total = ops[group[0]]
      for q in group[1:]:
        total = total + ops[q]
      out.append(_summary(total))
    return out
  assert kind == "local", step
  return [_summary(_local(step, ops[r], r)) for r in range(nranks)]


def _expect_nested(step: tuple, nranks: int, trip: int) -> list[np.ndarray]:
  if step[0] == "cond":
    out = []
    for r in range(nranks):
      taken = (
        step[4]
        if _decision_value(step, r, nranks) > _threshold(step)
        else step[5]
      )
      total = np.zeros(SUMMARY, np.float32)
      for inner in taken:
        total = total + _expect_step(inner, nranks, trip)[r]
      out.append(total)
    return out
  out = [np.zeros(SUMMARY, np.float32) for _ in range(nranks)]
  for i in range(step[2]):
    for inner in step[3]:
      values = _expect_step(inner, nranks, trip + i)
      out = [o + v for o, v in zip(out, values, strict=True)]
  return out


def _local(step: tuple, operand: np.ndarray, rank: int) -> np.ndarray:
  how = step[5]
  if how == "python":
    return operand * 2 if rank % 2 == 0 else operand + 1
  if how == "cond":
    return operand * 2 if rank > 0 else operand + 1
  return operand + (1 + rank)


def expected(program: Program) -> list[dict[str, list[float]]]:
  """Each rank's value of each step (by ``s<id>``) of the unbroken
  program."""
  out: list[dict[str, list[float]]] = [{} for _ in range(program.nranks)]
  for steps in program.calls:
    for step in steps:
      for r, value in enumerate(_expect_step(step, program.nranks)):
        out[r][f"s{step[1]}"] = value.tolist()
  return out


# One rank's program, in JAX (only under mpirun: `worker`).


def _build(program: Program, rank: int, comms: dict):
  """Rank `rank`'s jitted calls, by name."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  mpi4jax = comms["mpi4jax"]
  MPI = comms["MPI"]
  world = MPI.COMM_WORLD
  n = program.nranks

  def operand(step, x, trip):
    dtype = jnp.int32 if step[3] == "i32" else jnp.float32
    value = x[: step[2]] + _constant(step, rank) + trip
    return value.astype(dtype)

  def summary(value):
    end = min(SIZES)
    return jnp.concatenate([value[:4], value[end - 4 : end]]).astype(
      jnp.float32
    )

  def emit(step, x, trip):
    kind = step[0]
    if kind == "cond":
      return emit_cond(step, x, trip)
    if kind == "loop":
      return emit_loop(step, x, trip)
    o = operand(step, x, trip)
    if kind == "allreduce":
      op = MPI.MAX if step[5] == "max" else MPI.SUM
      return summary(mpi4jax.allreduce(o, op=op, comm=world))
    if kind == "bcast":
      root = step[5]
      buffer = o if rank == root else jnp.zeros_like(o)
      return summary(mpi4jax.bcast(buffer, root, comm=world))
    if kind == "reduce":
      return summary(mpi4jax.reduce(o, op=MPI.SUM, root=step[5], comm=world))
    if kind == "sendrecv":
      shift, tag = step[5], step[6]
      got = mpi4jax.sendrecv(
        o,
        jnp.zeros_like(o),
        source=(rank - shift) % n,
        dest=(rank + shift) % n,
        sendtag=max(tag, 0),
        recvtag=tag,
        comm=world,
      )
      return summary(got)
    if kind == "p2p":
      src, dst, tag = step[5], step[6], step[7]
      if rank == src:
        mpi4jax.send(o, dest=dst, tag=max(tag, 0), comm=world)
      if rank == dst:
        got = mpi4jax.recv(
          jnp.zeros_like(o),
          source=src,
          tag=MPI.ANY_TAG if tag < 0 else tag,
          comm=world,
        )
        return summary(got)
      return summary(o)
    if kind == "pair":
      src, dst, tag, same_tag, backwards = step[5:10]
      tags = (tag, tag if same_tag else tag + 1)
      if rank == src:
        mpi4jax.send(o, dest=dst, tag=tags[0], comm=world)
        mpi4jax.send(o * 3, dest=dst, tag=tags[1], comm=world)
      if rank != dst:
        return summary(o)
      got = {}
      for k in (1, 0) if backwards else (0, 1):
        got[k] = mpi4jax.recv(
          jnp.zeros_like(o), source=src, tag=tags[k], comm=world
        )
      return summary(got[0] + 2 * got[1])
    if kind == "exchange":
      a, b, tag = step[5], step[6], step[7]
      if rank not in (a, b):
        return summary(o)
      peer = b if rank == a else a
      send_first = tag < 0 or rank < peer
      tag = max(tag, 0)
      if send_first:
        mpi4jax.send(o, dest=peer, tag=tag, comm=world)
        got = mpi4jax.recv(jnp.zeros_like(o), source=peer, tag=tag, comm=world)
      else:
        got = mpi4jax.recv(jnp.zeros_like(o), source=peer, tag=tag, comm=world)
        mpi4jax.send(o, dest=peer, tag=tag, comm=world)
      return summary(got)
    if kind == "gather_any":
      dst = step[5]
      if rank != dst:
        mpi4jax.send(o, dest=dst, tag=TAG_ANY, comm=world)
        return summary(o)
      total = jnp.zeros_like(o)
      for _ in range(n - 1 + (step[6] if len(step) > 6 else 0)):
        total = total + mpi4jax.recv(
          jnp.zeros_like(o), source=MPI.ANY_SOURCE, tag=TAG_ANY, comm=world
        )
      return summary(total)
    if kind == "split":
      return summary(mpi4jax.allreduce(o, op=MPI.SUM, comm=comms[step[5]]))
    assert kind == "local", step
    how = step[5]
    if how == "python":  # A Python branch on the rank.
      return summary(o * 2 if rank % 2 == 0 else o + 1)
    if how == "cond":  # A decision on the rank's own data.
      return summary(lax.cond(x[0] > 5, lambda v: v * 2, lambda v: v + 1, o))
    return summary(lax.fori_loop(0, 1 + rank, lambda i, v: v + 1, o))

  def emit_cond(step, x, trip):
    how = step[2]
    constant = step[1] + 1
    zeros = jnp.zeros(SUMMARY, jnp.float32)

    def branch(steps):
      def run(x):
        total = zeros
        for inner in steps:
          total = total + emit(inner, x, trip)
        return total

      return run

    if how == "shared":
      v = mpi4jax.allreduce(x[:1] + constant, op=MPI.SUM, comm=world)[0]
    elif how == "bcast":
      mine = x[:1] + constant if rank == 0 else jnp.zeros(1, jnp.float32)
      v = mpi4jax.bcast(mine, 0, comm=world)[0]
    elif how == ("reduce",):
      # Only the root holds the sum: the others take the other branch.
      v = mpi4jax.reduce(x[:1] + constant, op=MPI.SUM, root=0, comm=world)[0]
      total = sum(10 * r + constant for r in range(n))
      return lax.cond(v > total - 0.5, branch(step[4]), branch(step[5]), x)
    else:
      v = x[0] - 10 * how[1] + 5
    return lax.cond(v > _threshold(step), branch(step[4]), branch(step[5]), x)

  def emit_loop(step, x, trip):
    def body(i, total):
      for inner in step[3]:
        total = total + emit(inner, x, trip + i)
      return total

    return lax.fori_loop(0, step[2], body, jnp.zeros(SUMMARY, jnp.float32))

  built = {}
  for name, steps in program.rank_calls(rank):

    def call(x, steps=steps):
      return {f"s{step[1]}": emit(step, x, 0) for step in steps}

    call.__name__ = name
    built[name] = jax.jit(call)
  return built


def worker(seed: int, out: pathlib.Path) -> None:
  """One rank of `seed`'s program under mpirun: compiles every call (so
  its dump folder holds them all), writes its plan, runs them under
  `record_executions`, then its values."""
  import faulthandler
  import importlib

  MPI = importlib.import_module("mpi4py.MPI")
  rank = MPI.COMM_WORLD.Get_rank()
  folder = out / f"rank{rank}"
  folder.mkdir(parents=True, exist_ok=True)
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={folder}"
  )
  import jax
  import jax.numpy as jnp

  from entangle_jax.testing import record_executions
  from entangle_jax.testing._ways_in.executions import world_layout

  mpi4jax = importlib.import_module("mpi4jax")
  program = generate(seed)
  world = MPI.COMM_WORLD
  comms = {"mpi4jax": mpi4jax, "MPI": MPI}
  for which in (0, 1):
    (group,) = [g for g in split_groups(program.nranks, which) if rank in g]
    comms[which] = world.Split(group[0], rank)
  with record_executions(folder):
    x = jnp.asarray(rank_input(rank))
    built = {
      name: f.lower(x).compile()
      for name, f in _build(program, rank, comms).items()
    }
    order = [name for name, _ in program.rank_calls(rank)]
    plan = {
      "calls": order,
      "world_rank": rank,
      "communicators": [
        {
          "handle": c.handle,
          "world_ranks": list(world_layout(MPI, c.handle) or ()),
        }
        for c in (world, comms[0], comms[1])
      ],
    }
    (out / f"plan{rank}.json").write_text(json.dumps(plan))
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    values = {}
    for name in order:
      result = jax.block_until_ready(built[name](x))
      values.update({k: np.asarray(v).tolist() for k, v in result.items()})
    faulthandler.cancel_dump_traceback_later()
  (out / f"values{rank}.json").write_text(json.dumps(values))


# The driver.


def planned_records(
  out: pathlib.Path, nranks: int, into: pathlib.Path
) -> list[str]:
  """Copies of each rank's dump folder whose execution record is the one
  the rank meant to write: its calls' modules in its order (the last
  module of each call's name), its communicators' layouts."""
  from entangle_jax.testing._analysis.rank_sequences import (
    RECORD,
    RECORD_FORMAT,
  )

  folders = []
  for r in range(nranks):
    source = out / f"rank{r}"
    target = into / f"rank{r}"
    target.mkdir(parents=True)
    for path in source.glob("module_*.cpu_after_optimizations.txt"):
      shutil.copy(path, target)
    plan = json.loads((out / f"plan{r}.json").read_text())
    numbers = {}
    for path in sorted(source.glob("module_*.cpu_after_optimizations.txt")):
      match = re.match(r"module_(\d+)\.(jit_call\d+)\.", path.name)
      if match:
        numbers[match.group(2)] = int(match.group(1))
    executions = [
      {
        "module": numbers[f"jit_{name}"],
        "name": f"jit_{name}",
        "thread": 0,
        "concurrent": False,
      }
      for name in plan["calls"]
    ]
    layouts = {c["handle"]: c["world_ranks"] for c in plan["communicators"]}
    record = {
      "format": RECORD_FORMAT,
      "complete": True,
      "unknown": 0,
      "executions": executions,
      "world_rank": r,
      "communicators": [
        {"handle": h, "world_ranks": w} for h, w in sorted(layouts.items())
      ],
    }
    (target / RECORD).write_text(json.dumps(record, indent=1))
    folders.append(str(target))
  return folders


def check(folders: list[str]) -> tuple[int, str]:
  """``--ranks`` on `folders`: its exit status and first line."""
  from entangle_jax.testing._ways_in import command

  out, err = io.StringIO(), io.StringIO()
  status = command.main(["--ranks", *folders], out=out, err=err)
  # The verdict: the first line that is not the list of executions, a
  # module's heading or a detail.
  said = [
    line
    for line in (out.getvalue() + err.getvalue()).splitlines()
    if line and not line.startswith(("the executions", "jit_", " "))
  ]
  return status, said[0] if said else ""


def _unread(folder: str, names: list[str]) -> list[str]:
  """What a kept run leaves out: the dump's files that the check does
  not read."""
  del folder
  return [
    name
    for name in names
    if name.startswith("module_")
    and not name.endswith("after_optimizations.txt")
  ]


@dataclasses.dataclass
class Outcome:
  program: Program
  truth: str
  """``right``, ``wrong``, ``hang`` or ``abort``."""
  status: int
  said: str
  planned_status: int
  planned_said: str


def _truth(
  program: Program, out: pathlib.Path, code: int | None, log: str
) -> str:
  if code is None or "Timeout (0:" in log:
    return "hang"
  if code != 0:
    return "abort"
  want = expected(program)
  for r in range(program.nranks):
    path = out / f"values{r}.json"
    if not path.exists():
      return "abort"
    got = json.loads(path.read_text())
    # A step a rank left out (a mutation) has no value to compare.
    for key, value in want[r].items():
      if key in got and not np.allclose(got[key], value, rtol=1e-6):
        return "wrong"
  return "right"


def run_one(program: Program, keep: pathlib.Path | None = None) -> Outcome:
  """Runs `program` under mpirun, then the check on its dumps."""
  with tempfile.TemporaryDirectory(prefix="rank_corpus") as scratch:
    out = pathlib.Path(scratch) / "run"
    out.mkdir()
    command = [
      "mpirun",
      "--oversubscribe",
      "-n",
      str(program.nranks),
      sys.executable,
      "-m",
      "benchmarks.rank_corpus",
      "--worker",
      str(program.seed),
      str(out),
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
      done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=LAUNCH_S,
        env=env,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
      )
      code, log = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
      code, log = None, str(stopped.stdout or "") + str(stopped.stderr or "")
    (out / "launch.log").write_text(log)
    truth = _truth(program, out, code, log)
    planned = all(
      (out / f"plan{r}.json").exists() for r in range(program.nranks)
    )
    folders = [str(out / f"rank{r}") for r in range(program.nranks)]
    status, said = check(folders)
    if planned:
      planned_status, planned_said = check(
        planned_records(out, program.nranks, pathlib.Path(scratch) / "planned")
      )
    else:  # A rank ended before it compiled its calls.
      planned_status, planned_said = 2, "no plan: a rank ended before compiling"
    if keep is not None:
      target = keep / f"seed{program.seed}"
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(scratch, target, ignore=_unread)
  return Outcome(program, truth, status, said, planned_status, planned_said)


@dataclasses.dataclass
class Counts:
  """The counts of one corpus, for the command's answer on the run's
  folders (``command``) and on the planned records (``planned``)."""

  programs: int = 0
  truths: dict = dataclasses.field(default_factory=dict)
  command: dict = dataclasses.field(default_factory=dict)
  planned: dict = dataclasses.field(default_factory=dict)
  unsound: list = dataclasses.field(default_factory=list)
  false: list = dataclasses.field(default_factory=list)

  def add(self, outcome: Outcome) -> None:
    self.programs += 1
    self.truths[outcome.truth] = self.truths.get(outcome.truth, 0) + 1
    for table, status in (
      (self.command, outcome.status),
      (self.planned, outcome.planned_status),
    ):
      key = _bucket(outcome, status)
      table[key] = table.get(key, 0) + 1
    if outcome.truth != "right" and 0 in (
      outcome.status,
      outcome.planned_status,
    ):
      self.unsound.append(outcome)
    if (
      outcome.truth == "right"
      and outcome.program.mutation is None
      and outcome.planned_status == 1
    ):
      self.false.append(outcome)

  def table(self) -> str:
    rows = [
      ("proved but hangs/aborts/wrong", "unsound"),
      ("proved, right", "proved_right"),
      ("reported, hangs/aborts/wrong", "reported_bad"),
      ("reported but right (correct program)", "false_report"),
      ("reported but right (broken program)", "reported_latent"),
      ("cannot answer, right", "unknown_right"),
      ("cannot answer, hangs/aborts/wrong", "unknown_bad"),
    ]
    truths = ", ".join(f"{k} {v}" for k, v in sorted(self.truths.items()))
    lines = [
      f"programs {self.programs} ({truths})",
      f"{'':38} --ranks  planned",
    ]
    for label, key in rows:
      lines.append(
        f"{label:38} {self.command.get(key, 0):7}  {self.planned.get(key, 0):7}"
      )
    return "\n".join(lines)


def _bucket(outcome: Outcome, status: int) -> str:
  bad = outcome.truth != "right"
  if status == 0:
    return "unsound" if bad else "proved_right"
  if status == 1:
    if bad:
      return "reported_bad"
    return (
      "false_report" if outcome.program.mutation is None else "reported_latent"
    )
  return "unknown_bad" if bad else "unknown_right"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.rank_corpus")
  parser.add_argument("--size", type=int, default=150)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--keep", type=pathlib.Path, help="keep each run's folder here"
  )
  parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    worker(int(args.worker[0]), pathlib.Path(args.worker[1]))
    return 0
  counts = Counts()
  for seed in range(args.seed, args.seed + args.size):
    outcome = run_one(generate(seed), args.keep)
    counts.add(outcome)
    print(
      f"seed {seed}: {outcome.truth:5} --ranks {outcome.status} "
      f"planned {outcome.planned_status}: {outcome.planned_said[:100]}",
      flush=True,
    )
  print(counts.table())
  for outcome in counts.unsound:
    print("proved but", outcome.truth + ":", outcome.program.describe())
  for outcome in counts.false:
    print("false report:", outcome.program.describe(), outcome.planned_said)
  return 0


if __name__ == "__main__":
  sys.exit(main())
