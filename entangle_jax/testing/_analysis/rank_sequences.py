"""The cross-rank check over a sequence of executions (issue 77, defect 4).

A multi-process program is a sequence of jitted calls on each rank: one
execution of a compiled module after another. Checking each module of a
rank against the other ranks' module of its place in compile order sees
nothing of a rank that calls ``g`` before ``f`` while another calls ``f``
first (MPI then aborts, or each rank gets the other's data). So each
rank's executions, in the order the rank ran them, are concatenated into
one sequence of communicating calls, and the ranks' sequences are checked
against each other, call by call (`check_executions`).

The order comes from an *execution record*: a file `RECORD` in the rank's
dump folder, which `entangle_jax.testing._ways_in.executions` writes
while the rank runs (the pytest plugin's ``--entangle-ranks`` keeps one).
It names each execution's module by XLA's module number (the dump's
``module_NNNN``) and name. Where a rank has no complete record, the dump
says which modules the rank compiled, not in which order or how often it
ran them, and nothing is proved of several modules (`RankRecordMissing`).

A call's operand origin (`Call.origin`) is named with its module: two
calls of one type from different jitted functions are never taken for
the same data, so ``f`` and ``g`` swapped on one rank are a swap even
where each makes one allreduce of one type from its first parameter.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence

from entangle_jax.testing._analysis.across_ranks import (
  CrossRankResult,
  check_programs,
)
from entangle_jax.testing._analysis.communicators import Layout
from entangle_jax.testing._analysis.ranks import (
  Branch,
  Call,
  Item,
  Loop,
  RankProgram,
  Unordered,
)

RECORD = "entangle_executions.json"
"""The execution record's file name, in a rank's dump folder."""

RECORD_FORMAT = 1
"""The record's ``format``: a record of another format is not read."""


class RankRecordMissing(ValueError):
  """A rank's execution record is absent, unfinished or unreadable, or
  names a module its dump does not hold: the order of its executions is
  not known, and nothing is proved of a sequence of several modules."""


@dataclasses.dataclass(frozen=True)
class Execution:
  """One execution of a compiled module on a rank."""

  number: int
  """XLA's module number (the dump's ``module_NNNN``; the module's id)."""
  name: str
  """The module's name (``jit_f``)."""
  thread: int = 0
  """The thread that ran it, numbered in the order threads first ran
  one."""
  concurrent: bool = False
  """Whether another execution of the rank was in flight as it began (a
  thread's, or the one whose host callback made it)."""


@dataclasses.dataclass(frozen=True)
class ExecutedCall(Call):
  """A communicating call of one execution in a rank's sequence: a `Call`
  that names its module and execution in reports."""

  module: str = ""
  execution: int = 0
  """The execution's place in the rank's sequence, from 1."""

  def label(self) -> str:
    return f"{super().label()} (in {self.module}, execution {self.execution})"


def read_record(folder: str | pathlib.Path) -> tuple[Execution, ...]:
  """The executions that `folder`'s record lists, in the order the rank
  ran them.

  Raises:
    RankRecordMissing: no record in `folder`, one that is not JSON of
      `RECORD_FORMAT`, or one not marked complete (the rank was still
      running, or died, when it was last written).
  """
  data, path = _record(folder)
  found = []
  for entry in data.get("executions", ()):
    try:
      found.append(
        Execution(
          int(entry["module"]),
          str(entry["name"]),
          int(entry.get("thread", 0)),
          bool(entry.get("concurrent", False)),
        )
      )
    except (KeyError, TypeError, ValueError):
      raise RankRecordMissing(
        f"{path}: an execution {entry!r} is unreadable"
      ) from None
  return tuple(found)


def read_layouts(folder: str | pathlib.Path, rank: int) -> dict[int, Layout]:
  """The layout of each communicator that `folder`'s record holds
  (`executions.Recorder`, where the rank ran mpi4py's MPI), by handle;
  empty where it holds none.

  Raises:
    RankRecordMissing: as `read_record`; also where the record was
      written by another world rank than `rank` (the folders are not in
      rank order), or a layout is unreadable.
  """
  data, path = _record(folder)
  written_by = data.get("world_rank")
  if written_by is None:
    return {}
  if written_by != rank:
    raise RankRecordMissing(
      f"{path}: the record was written by world rank {written_by!r}, but "
      f"its folder is given as rank {rank}: give the folders in rank order"
    )
  layouts: dict[int, Layout] = {}
  for entry in data.get("communicators", ()):
    try:
      handle = entry["handle"]
      world = tuple(entry["world_ranks"])
      if not isinstance(handle, int) or not all(
        isinstance(r, int) for r in world
      ):
        raise TypeError(entry)
    except (KeyError, TypeError):
      raise RankRecordMissing(
        f"{path}: a communicator's layout {entry!r} is unreadable"
      ) from None
    layouts[handle] = world
  return layouts


def _record(folder: str | pathlib.Path) -> tuple[dict, pathlib.Path]:
  """`folder`'s record, read and checked (`read_record`), and its path."""
  if not pathlib.Path(folder).is_dir():
    raise RankRecordMissing(
      f"{folder} is a module file, not a dump folder with an execution record"
    )
  path = pathlib.Path(folder) / RECORD
  try:
    data = json.loads(path.read_text())
  except FileNotFoundError:
    raise RankRecordMissing(
      f"{folder} holds no execution record ({RECORD})"
    ) from None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
    raise RankRecordMissing(
      f"{path}: not an execution record ({error})"
    ) from None
  if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
    raise RankRecordMissing(
      f"{path}: not an execution record of format {RECORD_FORMAT}"
    )
  if data.get("complete") is not True:
    raise RankRecordMissing(
      f"{path}: the record is not complete (the rank had not finished "
      "when it was last written), so executions may be missing"
    )
  return data, path


def executed(
  folder: str,
  rank: int,
  record: Sequence[Execution],
  compiled: dict[int, tuple[str, str, RankProgram | None]],
) -> list[tuple[str, str, RankProgram]]:
  """`record`'s executions of communicating modules, each as (name, file,
  program), in the order the rank ran them.

  Args:
    folder: the rank's dump folder, for messages.
    rank: the rank, for messages.
    record: the rank's executions (`read_record`).
    compiled: every optimized module of the dump by number: its name, file
      and program (None for a module that does not communicate).

  Raises:
    RankRecordMissing: an execution of a module the dump does not hold (it
      may communicate), or whose name is not the dumped module's; or
      communicating executions whose order another run may change: one
      that began while another ran, or ones of two threads.
  """
  out = []
  threads: dict[int, str] = {}
  for k, execution in enumerate(record, 1):
    found = compiled.get(execution.number)
    if found is None:
      raise RankRecordMissing(
        f"rank {rank}: its record names module {execution.number} "
        f"({execution.name}), which {folder} does not hold: what it "
        "communicates is unknown"
      )
    name, file, program = found
    if name != execution.name:
      raise RankRecordMissing(
        f"rank {rank}: its record's module {execution.number} is "
        f"{execution.name}, the dump's is {name} ({file}): the record is "
        "of another run"
      )
    if program is None:
      continue
    if execution.concurrent:
      raise RankRecordMissing(
        f"rank {rank}: its execution {k} ({name}) communicates and began "
        "while another of its executions ran (another thread's, or the one "
        "whose host callback made it), so the order of their calls is not "
        "known"
      )
    threads.setdefault(execution.thread, name)
    if len(threads) > 1:
      first, second = threads.values()
      raise RankRecordMissing(
        f"rank {rank}: two of its threads ran communicating modules ({first} "
        f"and {second}): their order may differ from run to run"
      )
    out.append((name, file, program))
  return out


@dataclasses.dataclass(frozen=True)
class _Sequence:
  """What `check_programs` reads of a rank: its items and unordered
  pairs, here over all its executions."""

  items: tuple[Item, ...]
  unordered: tuple[Unordered, ...]


def _named(items: tuple[Item, ...], module: str, execution: int):
  """`items`, each call an `ExecutedCall` of `module`'s `execution`, its
  origin named with the module."""
  out: list[Item] = []
  for item in items:
    if isinstance(item, Loop):
      item = dataclasses.replace(
        item, body=_named(item.body, module, execution)
      )
    elif isinstance(item, Branch):
      item = dataclasses.replace(
        item,
        branches=tuple(_named(b, module, execution) for b in item.branches),
      )
    else:
      fields = {f.name: getattr(item, f.name) for f in dataclasses.fields(Call)}
      fields["origin"] = f"{module}: {item.origin}"
      item = ExecutedCall(**fields, module=module, execution=execution)
    out.append(item)
  return tuple(out)


def check_executions(
  executions: Sequence[Sequence[tuple[str, RankProgram]]],
  layouts: Sequence[Mapping[int, Layout]] | None = None,
) -> CrossRankResult:
  """The cross-rank check of each rank's executions, in the order it ran
  them: per rank, (module name, program) of each execution of a
  communicating module. Each rank's calls over all its executions are one
  sequence, and the ranks' sequences are checked as `races_across`
  checks one module a rank: a rank that runs ``g`` before ``f`` where
  another runs ``f`` first is a mismatch (calls of different types) or a
  swap (one type: their origins name different modules), each call
  naming its module and execution.

  Executions are taken to run one after another, in the recorded order,
  each making its calls before the next begins. `layouts` holds each
  rank's recorded communicator layouts (`read_layouts`)."""
  sequences = []
  for runs in executions:
    items: list[Item] = []
    unordered: dict[int, tuple[Unordered, ...]] = {}
    for k, (name, program) in enumerate(runs, 1):
      items += _named(program.items, name, k)
      unordered.setdefault(id(program), tuple(program.unordered))
    sequences.append(
      _Sequence(tuple(items), tuple(u for p in unordered.values() for u in p))
    )
  return check_programs(sequences, layouts)
