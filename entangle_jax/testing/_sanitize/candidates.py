"""Which calls of a run can be in a finding, found on the columns.

The checks (`checks`) walk Python objects; a block of a million calls on
one object needs none of them to find that nothing raced. What each check
can report is bounded by a test on the columns (numpy, O(n log n)):

* an overlap is two calls that ran at the same time: only the calls of a
  cluster of calls overlapping in time (sorted by start, a cluster begins
  where a call starts after every earlier one ended) of two calls or more;
* "out of order" and the safe-pair / ``Resource`` contradictions compare
  the calls of two places in one execution: only executions with calls of
  two places or more. Of those, an execution that ran in program order as
  plainly as can be (`plainly_in_order`: all its places in one context,
  each run as often, and in order of start each round of its calls is
  its places in program order, one after the other) gives no "out of
  order" race, "merged" race or unpaired places: the order check skips it
  (``order`` false), and the contradictions, which compare one call of
  each place on each object, see the first call of each place and key;
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
  key: np.ndarray | None = None,
  position: np.ndarray | None = None,
  context: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
  """The indices of the calls (in order of start) the checks must see,
  and per index whether the order check must see it (its execution's
  calls are all there, and it did not plainly run in program order).

  Args:
    start, end: per call, when it ran.
    serial: per call, its module's serial (-1: no known place).
    site: per call, its place (any index, equal for equal places).
    run_id: per call, its execution's id (`callbacks.UNKNOWN_RUN`: not
      known).
    touches_objects: per call, whether it touches an object at all.
    repeated_handle: per call, whether one of its handles is repeated
      where they are declared distinct.
    key: per call, what it touches as an index (`columns.CallColumns`);
      position, context: per call, its place's position in program order
      and the loops and branches it is in, as an index. Without them,
      every execution of two places or more is checked whole.
  """
  keep = repeated_handle.copy()
  active = np.flatnonzero(touches_objects)
  keep[active[overlapping(start[active], end[active])]] = True
  order = np.zeros(len(start), dtype=bool)
  placed = active[
    (serial[active] >= 0) & (run_id[active] != callbacks.UNKNOWN_RUN)
  ]
  if not len(placed):
    found = np.flatnonzero(keep)
    return found, order[found]
  execution, n = groups(serial[placed], run_id[placed])
  pairs, _ = groups(execution, site[placed])
  places = np.bincount(
    execution[np.unique(pairs, return_index=True)[1]], None, n
  )
  several = places[execution] >= 2
  if n >= 2 and _spans_meet(start[placed], end[placed], execution, n):
    keep[placed] = True
    order[placed[several]] = True
  elif key is None or position is None or context is None:
    keep[placed[several]] = True
    order[placed[several]] = True
  else:
    two = placed[several]  # Only executions of two places or more.
    plain = np.ones(len(placed), dtype=bool)
    plain[several] = plainly_in_order(
      execution[several], places, site[two], position[two], context[two],
      start[two],
    )[execution[several]]  # fmt: skip
    whole = several & ~plain
    keep[placed[whole]] = True
    order[placed[whole]] = True
    # One call of each place and key for the contradictions.
    rest = np.flatnonzero(several & plain)
    if len(rest):
      first = groups(execution[rest], site[placed][rest], key[placed][rest])[0]
      keep[placed[rest[np.unique(first, return_index=True)[1]]]] = True
  found = np.flatnonzero(keep)
  return found, order[found]


def plainly_in_order(
  execution: np.ndarray,
  places: np.ndarray,
  site: np.ndarray,
  position: np.ndarray,
  context: np.ndarray,
  start: np.ndarray,
) -> np.ndarray:
  """Per execution (`execution`: per call, in order of start, its dense
  index; `places`: per execution, how many places its calls are of),
  whether its calls ran in program order as plainly as
  can be: every place in one context (the same loops and branches: in a
  loop, each runs once an iteration), each run as often (rounds of m
  calls, m its places), and in order of start the calls are round after
  round, each round the m places in program order, each call starting
  after the one before. Then each pair of places pairs round by round
  (`checks.pairing`), the earlier place's call first in each: no "out of
  order" race, none "merged", and nothing unpaired."""
  total = len(execution)
  n = len(places)
  ok = np.ones(n, dtype=bool)
  if not total:
    return ok
  if n == 1 or (execution[1:] >= execution[:-1]).all():
    e, s, p, c, t = execution, site, position, context, start
  else:
    by = np.argsort(execution, kind="stable")  # Each in start order.
    e, s, p = execution[by], site[by], position[by]
    c, t = context[by], start[by]
  calls = np.bincount(e, None, n)
  first = np.cumsum(calls) - calls  # Each execution's first call.
  index = np.arange(total) - first[e]
  m = places
  ok &= calls % np.maximum(m, 1) == 0
  ok[e[c != c[first[e]]]] = False
  mm = m[e]
  # A round's calls: the places in program order, each after the last.
  within = (index % mm) != 0
  bad = np.zeros(total, dtype=bool)
  bad[1:] = within[1:] & ((p[1:] <= p[:-1]) | (t[1:] <= t[:-1]))
  # Each round the first one again.
  later = index >= mm
  back = np.flatnonzero(later)
  bad[back] |= s[back] != s[back - mm[back]]
  ok[e[bad]] = False
  return ok


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
