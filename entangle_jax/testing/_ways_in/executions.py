"""The execution record: which compiled modules a rank ran, in order
(issue 77, defect 4).

`record_executions(folder)` writes, while its block runs, each execution
of a jitted module of this process to ``folder/entangle_executions.json``
(`rank_sequences.RECORD`): the module's number (XLA's module id, the
``module_NNNN`` of a dump) and its name. ``--ranks`` follows it where
every rank's dump folder holds one (`rank_sequences`), so a rank that
runs ``g`` before ``f`` is compared call by call against one that runs
``f`` first.

The record is written anew as the block begins, marked incomplete, and
marked complete as it ends: a rank that died inside leaves a record
that proves nothing.

Where the process runs MPI through mpi4py (already imported and
initialized: the recorder never starts MPI), the record also holds the
process's world rank and each communicator's layout (`Layout`: the
world rank of each of its ranks), for every communicator a module that
ran names: the cross-rank check proves peers only on communicators that
number the ranks as the world does (`communicators.unseen`), and a
module holds a communicator's handle, not its ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import sys
import threading
from collections.abc import Callable, Generator
from typing import Any

from entangle_jax.testing._analysis.rank_sequences import (
  RECORD,
  RECORD_FORMAT,
  Execution,
)
from entangle_jax.testing._sanitize import jax_hooks


def _varint(data: bytes, at: int) -> tuple[int, int]:
  value = shift = 0
  while True:
    byte = data[at]
    at += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if byte < 0x80:
      return value, at


def module_id(proto: bytes) -> int | None:
  """The ``id`` (field 5) of a serialized ``HloModuleProto``: the number
  XLA gives the module's dump files (``module_NNNN``); 0 where the field
  is absent (proto3 leaves a 0 out: the process's first module); None
  where the bytes are not read to their end. Only the top level is read
  (no protobuf library)."""
  at = 0
  while at < len(proto):
    key, at = _varint(proto, at)
    field, wire = key >> 3, key & 7
    if wire == 0:
      value, at = _varint(proto, at)
      if field == 5:
        return value
    elif wire == 2:
      size, at = _varint(proto, at)
      at += size
    elif wire == 1:
      at += 8
    elif wire == 5:
      at += 4
    else:  # Groups are not in an HloModuleProto.
      return None
  return 0 if at == len(proto) else None


class Recorder:
  """The executions seen so far, written to `path` after each one."""

  def __init__(self, folder: str | os.PathLike[str]):
    self.path = pathlib.Path(folder) / RECORD
    self.executions: list[Execution] = []
    self.unknown = 0
    """Executions whose module had no number: the record then proves
    nothing (`write` never marks it complete)."""
    self._numbers: dict[int, tuple[Any, Execution | None]] = {}
    """By the executable's id: the executable, kept alive so that its id
    is not another's while the block runs (an inline ``jax.jit(f)(x)``
    frees its own at once), and its module's execution."""
    self._lock = threading.Lock()
    self._in_flight = 0
    self._threads: dict[int, int] = {}
    """Each thread that ran an execution: its number in the record."""
    self.layouts: dict[int, tuple[int, ...]] = {}
    """Each communicator's layout, by the handle its modules hold."""
    self.world_rank: int | None = None

  def executed(self, executable) -> Callable[[bool], None]:
    """`jax_hooks.on_execute`'s callback: one execution of `executable`
    begins. The execution is recorded as it is handed to the runtime
    (what this returns is called then), not where it raised first; with
    the thread that ran it, and whether another execution of this
    process was in flight as it began (a thread's, or the one whose host
    callback made this one): their calls' order is then not known."""
    key = id(executable)
    if key not in self._numbers:
      found = None
      modules = executable.hlo_modules()
      if len(modules) == 1:
        number = module_id(modules[0].as_serialized_hlo_module_proto())
        if number is not None:
          found = Execution(number, modules[0].name)
        self._note_communicators(modules[0])
      self._numbers[key] = (executable, found)
    found = self._numbers[key][1]
    thread = threading.get_ident()
    with self._lock:
      concurrent = self._in_flight > 0
      self._in_flight += 1
      number = self._threads.setdefault(thread, len(self._threads))

    def done(ran: bool) -> None:
      with self._lock:
        self._in_flight -= 1
        if not ran:
          return
        if found is None:
          self.unknown += 1
        else:
          self.executions.append(
            dataclasses.replace(found, thread=number, concurrent=concurrent)
          )
        self.write(complete=False)

    return done

  def _note_communicators(self, module: Any) -> None:
    """Records the layout of each communicator `module` names, where
    this process runs mpi4py's MPI (`world_layout`)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
      return
    # Imported here: the analysis is needed only where MPI runs.
    from entangle_jax.testing._analysis import communicators
    from entangle_jax.testing._analysis.ranks import RankProgram

    try:
      calls = RankProgram(module.to_string(), who="record_executions").calls()
      handles = communicators.handles(calls)
    except (TypeError, ValueError):
      # A module the check cannot read either: it answers for it itself.
      return
    self.world_rank = mpi.COMM_WORLD.Get_rank()
    for handle in handles - self.layouts.keys():
      layout = world_layout(mpi, handle)
      if layout is not None:
        self.layouts[handle] = layout

  def write(self, complete: bool) -> None:
    """Writes the record (through a temporary file, so a reader never
    sees half of one); `complete` only where every execution is named."""
    data = {
      "format": RECORD_FORMAT,
      "complete": complete and not self.unknown,
      "unknown": self.unknown,
      "executions": [
        {
          "module": e.number,
          "name": e.name,
          "thread": e.thread,
          "concurrent": e.concurrent,
        }
        for e in self.executions
      ],
    }
    if self.world_rank is not None:
      data["world_rank"] = self.world_rank
      data["communicators"] = [
        {"handle": handle, "world_ranks": list(layout)}
        for handle, layout in sorted(self.layouts.items())
      ]
    self.path.parent.mkdir(parents=True, exist_ok=True)
    partial = self.path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, self.path)


def world_layout(mpi: Any, handle: int) -> tuple[int, ...] | None:
  """The layout of the communicator whose handle is `handle` (as a
  module holds it: mpi4jax passes it as a signed 64-bit int), through
  mpi4py's module `mpi`: the ``COMM_WORLD`` rank of each of its ranks,
  in its order; None where mpi4py cannot make a communicator of it."""
  for value in (handle, handle % (1 << 64), handle % (1 << 32)):
    try:
      comm = mpi.Comm.fromhandle(value)
      if comm == mpi.COMM_NULL:
        return None
      group, world = comm.Get_group(), mpi.COMM_WORLD.Get_group()
    except (AttributeError, OverflowError, TypeError, ValueError):
      continue  # No such handle in this form (or an mpi4py before 4).
    except mpi.Exception:  # Not a communicator this process holds.
      return None
    try:
      ranks = mpi.Group.Translate_ranks(group, range(group.Get_size()), world)
    finally:
      group.Free()
      world.Free()
    if any(r == mpi.UNDEFINED for r in ranks):
      return None
    return tuple(int(r) for r in ranks)
  return None


@contextlib.contextmanager
def record_executions(folder: str | os.PathLike[str]) -> Generator[Recorder]:
  """Records, while the block runs, every execution of a jitted module
  of this process, in order, to ``folder/entangle_executions.json``: the
  record ``--ranks`` follows. `folder` is the rank's dump folder (the
  ``--xla_dump_to`` of ``XLA_FLAGS``).

  Every jitted call inside goes through Python (JAX's C++ fast paths are
  off: `jax_hooks.on_execute`), so it runs slower, and the caches of
  compiled functions are cleared as the block begins and ends (what was
  compiled before it is compiled again, and dumped again under a new
  number). The record is marked complete as the block ends without an
  execution whose module it could not name.
  """
  recorder = Recorder(folder)
  recorder.write(complete=False)
  with jax_hooks.on_execute(recorder.executed):
    yield recorder
  recorder.write(complete=True)
