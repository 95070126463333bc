"""A sanitized run's calls as numpy columns, each `SanitizedCall` made
only when asked for.

A block of a million calls is a million records; making a Python object
of each costs more than everything else at exit. The checks need objects
only for the calls that can be in a finding (`candidates`), and a user
needs them all only when reading `Seen.calls`: `CallColumns` keeps the
native drain's records as columns, and makes the object of a call once,
on first use (the same object every time: a race names its calls by
identity, so ``race.first`` is the one in ``seen.calls``).
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from entangle_jax._src.targets.names import SANITIZER_ITERATION_TARGET
from entangle_jax.testing._sanitize import callbacks as _callbacks
from entangle_jax.testing._sanitize import sites as _sites
from entangle_jax.testing._sanitize import wrapping
from entangle_jax.testing._sanitize.calls import (
  FIELDS,
  HOST_FAMILY,
  SanitizedCall,
  record_dtype,
)


class NativeColumns:
  """The native drain's records as columns, in order of start (then of
  end), the records of targets no longer known left out.

  Attributes:
    columns: the record's scalar fields (`calls.FIELDS`), by name.
    target: per record, its index in `targets`.
    targets: (name, platform, family) of each target.
    operand: per record, its index in `operands`.
    operands: each distinct operand tuple (``((operand, values), ...)``);
      index 0 is ``()``.
    site: per record, its index in `sites`.
    sites: each distinct site (None: no known place).
    iterations: the starts of each loop's iteration markers
      (`sites._Walker.mark_iterations`), in order, by (module serial,
      run id, loop number): how many began before a call of the loop is
      the iteration it ran in, counted from 1 (`iteration`). The markers'
      records are no calls.
  """

  def __init__(
    self,
    raw: bytes,
    layout: dict,
    overflow_operands: bytes = b"",
    overflow_values: bytes = b"",
  ):
    records = np.frombuffer(raw, dtype=record_dtype(layout))
    # Columns first (taking whole structs in a new order is slow), then
    # each column in order of start (one thread's log is in order).
    order = _order_of_start(records["start_ns"], records["end_ns"])
    column = {
      name: np.ascontiguousarray(records[name])
      if order is None
      else records[name][order]
      for name, _ in FIELDS
    }
    if order is None:
      order = np.arange(len(records))
    operand, self.operands = _operands(
      records, order, column["n_values"], layout["max_values"],
      overflow_operands, overflow_values,
    )  # fmt: skip
    wrapped, target = np.unique(column["wrapped"], return_inverse=True)
    known = [wrapping.target_of(w) for w in wrapped.tolist()]
    keep = np.array([t is not None for t in known], dtype=bool)[target]
    target = target.reshape(-1)
    marks = np.array(
      [t is not None and t.name == SANITIZER_ITERATION_TARGET for t in known],
      dtype=bool,
    )[target]
    self.iterations = _iterations(
      column["site"][marks], column["run_id"][marks], column["start_ns"][marks]
    )
    keep &= ~marks  # The sanitizer's own: no call of the program.
    if not keep.all():
      column = {name: c[keep] for name, c in column.items()}
      target = target[keep]
      operand = operand[keep]
    self.columns: dict[str, np.ndarray] = column
    self.targets: list[tuple[str, str, str]] = [
      (t.name, t.platform, t.family) if t else ("", "", "") for t in known
    ]
    self.target: np.ndarray = target.reshape(-1)
    self.operand: np.ndarray = operand
    numbers, at_site = np.unique(column["site"], return_inverse=True)
    self.sites: list[_sites.CallSite | None] = [
      _sites.site(n) if n >= 0 else None for n in numbers.tolist()
    ]
    self.site: np.ndarray = at_site.reshape(-1)

  def __len__(self) -> int:
    return len(self.target)

  def iteration(self, call: SanitizedCall, loop: int) -> int | None:
    """The iteration of loop `loop` (`sites.Frame.construct`) of its module
    `call` ran in, counted from 1 over the whole execution (an inner
    loop's count goes on across the outer loop's iterations): how many of
    the loop's iteration markers of `call`'s execution began before it.
    None where its module's markers of that loop did not run in that
    execution (none were added, or XLA removed them)."""
    if call.site is None:
      return None
    found = self.iterations.get((call.site.module.serial, call.run_id, loop))
    if found is None:
      return None
    return int(np.searchsorted(found, call.start_ns, side="left"))

  def make(self, rows: np.ndarray) -> list[SanitizedCall]:
    """The calls of records `rows`, made now (each distinct target, site
    and operand tuple is one object, spread by numpy)."""
    if not len(rows):
      return []
    c = {name: self.columns[name][rows] for name in _MADE}
    target = self.target[rows]
    names, platforms, families = (
      _objects([t[k] for t in self.targets])[target].tolist() for k in range(3)
    )
    return list(
      map(
        SanitizedCall,
        names,
        platforms,
        families,
        c["thread"].tolist(),
        c["start_ns"].tolist(),
        c["end_ns"].tolist(),
        c["run_id"].tolist(),
        _objects(self.sites)[self.site[rows]].tolist(),
        _objects(self.operands)[self.operand[rows]].tolist(),
        (c["failed"] != 0).tolist(),
        (c["truncated"] != 0).tolist(),
        [None] * len(rows),
        c["device"].tolist(),
      )
    )


_MADE = (
  "thread",
  "start_ns",
  "end_ns",
  "run_id",
  "failed",
  "truncated",
  "device",
)
"""The columns a `SanitizedCall` takes as they are."""


def _iterations(
  site: np.ndarray, run_id: np.ndarray, start: np.ndarray
) -> dict[tuple[int, int, int], np.ndarray]:
  """The iteration markers' starts, sorted, by (module serial, run id,
  loop number); markers of a module this process did not make are left
  out."""
  if not len(site):
    return {}
  numbers, index = np.unique(site, return_inverse=True)
  index = index.reshape(-1)
  found = [_sites.marker(n) for n in numbers.tolist()]
  # One sort: by marker, then execution, then start; a segment per
  # (marker, execution), its starts in order.
  order = np.lexsort((start, run_id, index))
  index, run_id, start = index[order], run_id[order], start[order]
  change = (
    np.flatnonzero((index[1:] != index[:-1]) | (run_id[1:] != run_id[:-1])) + 1
  )
  bounds = [0, *change.tolist(), len(index)]
  out: dict[tuple[int, int, int], np.ndarray] = {}
  for a, b in itertools.pairwise(bounds):
    where = found[int(index[a])]
    if where is not None:
      out[(where[0], int(run_id[a]), where[1])] = start[a:b]
  return out


def _objects(values: list) -> np.ndarray:
  """`values` as a numpy object array (tuples kept whole)."""
  out = np.empty(len(values), dtype=object)
  out[:] = values
  return out


def _order_of_start(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
  """The records' order by start, then end; None when they are in it."""
  later = start[1:] > start[:-1]
  tie = start[1:] == start[:-1]
  if (later | (tie & (end[1:] >= end[:-1]))).all():
    return None
  return np.lexsort((end, start))


def _operands(
  records: np.ndarray,
  order: np.ndarray,
  n_values: np.ndarray,
  inline: int,
  overflow_operands: bytes,
  overflow_values: bytes,
) -> tuple[np.ndarray, list[tuple]]:
  """Each record's operand tuple as an index into a table of distinct
  ones (index 0 is ``()``, a call with no value recorded)."""
  at = np.zeros(len(order), dtype=np.int64)
  table: list[tuple] = [()]
  ones = np.flatnonzero(n_values == 1)
  if len(ones):
    # One tuple per distinct (operand, value), spread by numpy.
    rows = order[ones]
    ops = records["operand"][rows, 0].astype(np.int64)
    values = records["values"][rows, 0]
    if (ops == ops[0]).all() and (values == values[0]).all():
      distinct = np.array([[ops[0], values[0]]], np.int64)
      index = np.zeros(len(ones), np.int64)  # One object: one tuple.
    elif (ops == ops[0]).all():
      uniq, index = np.unique(values, return_inverse=True)
      distinct = np.stack([np.full(len(uniq), ops[0], np.int64), uniq], 1)
    else:
      pairs = np.stack([ops, values], axis=1)
      distinct, index = np.unique(pairs, axis=0, return_inverse=True)
    table += [((op, (value,)),) for op, value in distinct.tolist()]
    at[ones] = index.reshape(-1) + 1
  more_operands = np.frombuffer(overflow_operands, dtype=np.uint8)
  more_values = np.frombuffer(overflow_values, dtype="<i8")
  known: dict[tuple, int] = {}
  for k in np.flatnonzero(n_values > 1).tolist():
    n = int(n_values[k])
    row = int(order[k])
    ops = records["operand"][row, : min(n, inline)].tolist()
    values = records["values"][row, : min(n, inline)].tolist()
    if n > inline:
      start = int(records["overflow"][row])
      ops += more_operands[start : start + n - inline].tolist()
      values += more_values[start : start + n - inline].tolist()
    grouped: dict[int, list[int]] = {}
    for op, value in zip(ops, values, strict=True):
      grouped.setdefault(op, []).append(value)
    found = tuple((o, tuple(v)) for o, v in grouped.items())
    index = known.get(found)
    if index is None:
      index = known[found] = len(table)
      table.append(found)
    at[k] = index
  return at, table


class HostRecords:
  """The host callbacks' records (`callbacks.drain`'s list) as columns,
  each `SanitizedCall` made on first use: a loop of a million
  ``jax.debug.callback`` calls is a million records.

  Attributes:
    start_ns, end_ns, run_id, thread: per record.
    failed: per record, whether the callback raised.
    site: per record, its index in `sites`.
    sites: each distinct site.
  """

  def __init__(self, records: tuple[list, Any]):
    placed, numbers = records
    self.sites: list[_sites.CallSite] = []
    self._made: list[SanitizedCall] | None = None
    n = len(placed)
    table = np.frombuffer(numbers, np.int64).reshape(n, _callbacks.FIELDS)
    self.site: np.ndarray = np.zeros(0, np.int64)
    if n:
      ids = np.fromiter(map(id, placed), np.int64, n)
      _, first, site = np.unique(ids, return_index=True, return_inverse=True)
      self.sites = [placed[i] for i in first.tolist()]
      self.site = site.reshape(-1).astype(np.int64)
    self.thread: np.ndarray = table[:, 0]
    self.start_ns: np.ndarray = table[:, 1]
    self.end_ns: np.ndarray = table[:, 2]
    self.run_id: np.ndarray = table[:, 3]
    self.failed: np.ndarray = table[:, 4] != 0

  @classmethod
  def of_calls(cls, calls: list[SanitizedCall]) -> HostRecords:
    """The records of host callbacks made already (the objects kept)."""
    numbers = array.array("q")
    for c in calls:
      numbers.extend((c.thread, c.start_ns, c.end_ns, c.run_id, c.failed))
    out = cls(([c.site for c in calls], numbers))
    out._made = list(calls)
    return out

  def __len__(self) -> int:
    return len(self.start_ns)

  def make(self, rows: np.ndarray) -> list[SanitizedCall]:
    """The calls of records `rows`."""
    if self._made is not None:
      return [self._made[r] for r in rows.tolist()]
    sites = _objects(self.sites)[self.site[rows]].tolist()
    return list(
      map(
        SanitizedCall,
        [s.target for s in sites],
        [s.module.platform for s in sites],
        [HOST_FAMILY] * len(rows),
        self.thread[rows].tolist(),
        self.start_ns[rows].tolist(),
        self.end_ns[rows].tolist(),
        self.run_id[rows].tolist(),
        sites,
        [()] * len(rows),
        self.failed[rows].tolist(),
        [False] * len(rows),
        [s.host_callback or "?" for s in sites],
      )
    )

  def every(self) -> list[SanitizedCall]:
    """Every record's call, made now."""
    if self._made is None:
      self._made = self.make(np.arange(len(self)))
    return self._made


class CallColumns:
  """Every call of a run, native and host, in order of start (a stable
  sort: the native records in their order, then the host callbacks in
  theirs, as ``sorted(native + host, key=start)``).

  Attributes:
    start_ns, end_ns, run_id: per call.
    site: per call, its index in `sites`.
    sites: each distinct site (None: no known place).
    key: per call, what `touches` reads of it (target, operands, site,
      truncated) as an index: calls with one key touch the same.
  """

  def __init__(self, native: NativeColumns, host: HostRecords):
    self.native = native
    self.host = host
    n = len(native)
    columns = native.columns
    start = np.concatenate([columns["start_ns"], host.start_ns])
    self.order: np.ndarray = np.argsort(start, kind="stable")
    """Per call, its row: below len(native) a native record's, else a
    host callback's (its index in `host` plus len(native))."""
    self.start_ns: np.ndarray = start[self.order]
    self.end_ns: np.ndarray = self._spread(columns["end_ns"], "end_ns")
    self.run_id: np.ndarray = self._spread(columns["run_id"], "run_id")
    # Host callbacks' sites and keys after the native ones'.
    self.sites: list[_sites.CallSite | None] = [*native.sites, *host.sites]
    self.site: np.ndarray = np.concatenate(
      [native.site, host.site + len(native.sites)]
    )[self.order]
    native_key, first = _native_keys(native)
    position = np.empty(len(self.order), dtype=np.int64)
    position[self.order] = np.arange(len(self.order))
    self.representatives: list[int] = position[first].tolist()
    """Per key, one call of it (its index): what a key touches is asked
    of it."""
    # A host callback's key is its site (its target and family come from
    # it, and it records no operands).
    _, host_first = np.unique(host.site, return_index=True)
    host_key = len(self.representatives) + host.site
    self.representatives += position[n + host_first].tolist()
    self.key: np.ndarray = np.concatenate([native_key, host_key])[self.order]
    self._made = np.empty(len(self.order), dtype=object)
    self._is_made = np.zeros(len(self.order), dtype=bool)

  def _spread(self, native: np.ndarray, field: str) -> np.ndarray:
    host = getattr(self.host, field)
    return np.concatenate([native.astype(np.int64), host])[self.order]

  def __len__(self) -> int:
    return len(self.order)

  def at(self, indices: np.ndarray) -> list[SanitizedCall]:
    """The calls at `indices` (in order of start), made where not yet."""
    indices = np.asarray(indices, dtype=np.int64)
    missing = indices[~self._is_made[indices]]
    if len(missing):
      rows = self.order[missing]
      native = rows < len(self.native)
      made = np.empty(len(missing), dtype=object)
      made[native] = _objects(self.native.make(rows[native]))
      n = len(self.native)
      made[~native] = _objects(self.host.make(rows[~native] - n))
      self._made[missing] = made
      self._is_made[missing] = True
    return self._made[indices].tolist()

  def made(self) -> int:
    """How many of the calls were made so far."""
    return int(self._is_made.sum())

  def serials(self) -> np.ndarray:
    """Per call, its module's serial (-1: no known place)."""
    serial = np.array(
      [s.module.serial if s is not None else -1 for s in self.sites], np.int64
    )
    return serial[self.site] if len(self.sites) else self.site


def _native_keys(native: NativeColumns) -> tuple[np.ndarray, np.ndarray]:
  """Per native record, its key (target, operands, truncated, site) as a
  dense index, and for each key its first record."""
  if not len(native):
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  parts = (
    native.target,
    native.operand,
    native.columns["truncated"].astype(np.int64) != 0,
    native.site,
  )
  key = np.zeros(len(native), dtype=np.int64)
  for part in parts:
    part = part.astype(np.int64)
    if (part == part[0]).all():
      continue  # Nothing to tell apart (the usual case: one target).
    _, key = np.unique(key * (int(part.max()) + 1) + part, return_inverse=True)
    key = key.reshape(-1).astype(np.int64)
  _, first = np.unique(key, return_index=True)
  return key, first


class LazyCalls(Sequence[SanitizedCall]):
  """`Seen.calls`: every call of the run in order of start, each made on
  first use (see the module)."""

  def __init__(self, columns: CallColumns):
    self._columns = columns
    self._all: list[SanitizedCall] | None = None

  def __len__(self) -> int:
    return len(self._columns)

  @overload
  def __getitem__(self, index: int) -> SanitizedCall: ...

  @overload
  def __getitem__(self, index: slice) -> list[SanitizedCall]: ...

  def __getitem__(self, index: Any) -> Any:
    if self._all is not None:
      return self._all[index]
    if isinstance(index, slice):
      picked = np.arange(len(self))[index]
      return self._columns.at(picked)
    k = range(len(self))[index]  # Negative indices, and IndexError.
    return self._columns.at(np.array([k]))[0]

  def __iter__(self) -> Iterator[SanitizedCall]:
    return iter(self.every())

  def every(self) -> list[SanitizedCall]:
    """Every call, made now where not yet."""
    if self._all is None:
      self._all = self._columns.at(np.arange(len(self)))
    return self._all

  def __repr__(self) -> str:
    return repr(self.every())

  def __eq__(self, other: object) -> bool:
    if isinstance(other, LazyCalls):
      other = other.every()
    return self.every() == other

  __hash__ = None  # type: ignore[assignment]
