"""Which calls of a run can be in a finding, found on the columns.

The checks (`checks`) walk Python objects; a block of a million calls on
one object needs none of them to find that nothing raced. What each check
can report is bounded by a test on the columns (numpy, O(n log n)):

* an overlap is two calls that ran at the same time: only the calls of a
  cluster of calls overlapping in time (sorted by start, a cluster begins
  where a call starts after every earlier one ended) of two calls or more;
* "out of order" and the safe-pair / ``Resource`` contradictions compare
  the calls of two places in one execution: only executions with calls of
  two places or more;
* an interleaved write lies between two calls of another execution: only
  when two executions' spans (first start to last end) meet, and then all
  placed calls (the check's per-object order is then read whole);
* a handle twice in one call is a property of its key (`columns`).

The checks then run on exactly these calls, in their order: what they
report is what they would report on every call, since a finding's calls,
and every call the check looks at to decide it, are among them.
"""

from __future__ import annotations

import numpy as np

from entangle_jax.testing._sanitize import callbacks


def overlapping(start: np.ndarray, end: np.ndarray) -> np.ndarray:
  """Per call (in order of start), whether it is in a cluster of two or
  more calls that overlap in time (a call ending at another's start does
  not overlap it)."""
  n = len(start)
  if n < 2:
    return np.zeros(n, dtype=bool)
  ended = np.maximum.accumulate(end)
  begins = np.ones(n, dtype=bool)
  begins[1:] = start[1:] >= ended[:-1]
  cluster = np.cumsum(begins) - 1
  size = np.bincount(cluster)
  return size[cluster] >= 2


def groups(*columns: np.ndarray) -> tuple[np.ndarray, int]:
  """Per row, a dense index of its tuple of values in `columns`, and how
  many distinct tuples there are (one sort; none when all rows agree)."""
  n = len(columns[0])
  if not n:
    return np.zeros(0, np.int64), 0
  differ = [c for c in columns if not (c == c[0]).all()]
  if not differ:
    return np.zeros(n, np.int64), 1
  order = np.lexsort(differ[::-1])
  change = np.zeros(n, dtype=bool)
  change[0] = True
  for c in differ:
    s = c[order]
    change[1:] |= s[1:] != s[:-1]
  ids = np.empty(n, np.int64)
  ids[order] = np.cumsum(change) - 1
  return ids, int(change.sum())


def needed(
  start: np.ndarray,
  end: np.ndarray,
  serial: np.ndarray,
  site: np.ndarray,
  run_id: np.ndarray,
  touches_objects: np.ndarray,
  repeated_handle: np.ndarray,
) -> np.ndarray:
  """The indices of the calls (in order of start) the checks must see.

  Args:
    start, end: per call, when it ran.
    serial: per call, its module's serial (-1: no known place).
    site: per call, its place (any index, equal for equal places).
    run_id: per call, its execution's id (`callbacks.UNKNOWN_RUN`: not
      known).
    touches_objects: per call, whether it touches an object at all.
    repeated_handle: per call, whether one of its handles is repeated
      where they are declared distinct.
  """
  keep = repeated_handle.copy()
  active = np.flatnonzero(touches_objects)
  keep[active[overlapping(start[active], end[active])]] = True
  placed = active[
    (serial[active] >= 0) & (run_id[active] != callbacks.UNKNOWN_RUN)
  ]
  if not len(placed):
    return np.flatnonzero(keep)
  execution, n = groups(serial[placed], run_id[placed])
  pairs, _ = groups(execution, site[placed])
  places = np.bincount(
    execution[np.unique(pairs, return_index=True)[1]], None, n
  )
  keep[placed[places[execution] >= 2]] = True
  if n >= 2 and _spans_meet(start[placed], end[placed], execution, n):
    keep[placed] = True
  return np.flatnonzero(keep)


def _spans_meet(
  start: np.ndarray, end: np.ndarray, execution: np.ndarray, n: int
) -> bool:
  """Whether two executions' spans (first start to last end, closed)
  meet."""
  first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
  last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
  np.minimum.at(first, execution, start)
  np.maximum.at(last, execution, end)
  by_start = np.argsort(first, kind="stable")
  first, last = first[by_start], last[by_start]
  return bool((first[1:] <= np.maximum.accumulate(last)[:-1]).any())
