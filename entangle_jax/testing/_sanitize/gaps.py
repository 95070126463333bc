"""Which calls may have landed between two calls of one execution.

A call's record is a time window (`calls.SanitizedCall`: from when the
sanitizer's trampoline was entered to when it returned), wider than what
the handler did inside it. Two writes on one object whose windows overlap
took effect in an order the records do not say. So a write of another
execution may have landed between two calls `a` and `b` of one execution
(after `a`'s effect and before `b` read it) where its window is not wholly
before `a`'s nor wholly after `b`'s start: it began between the two, or
it began before `a` and was still running when `a` began. Both are
looked at; only a write wholly before `a` or begun after `b` began is
left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Protocol


class _Timed(Protocol):
  start_ns: int
  end_ns: int


def longest(calls: Sequence[_Timed]) -> int:
  """The longest window among `calls` (0 for none)."""
  return max((c.end_ns - c.start_ns for c in calls), default=0)


def reach(calls: Sequence[_Timed]) -> list[int]:
  """Per index of `calls` (sorted by start), the latest end among the
  calls up to it: a call at index i + 1 has a call before it still
  running when it began only where this at i is past its start."""
  return list(itertools.accumulate((c.end_ns for c in calls), max))


def in_gap(calls: Sequence[_Timed], i: int, j: int, span: int) -> Iterator[int]:
  """The indices of the calls of `calls` (sorted by start) that may have
  landed between ``calls[i]`` and ``calls[j]`` (i < j): those that began
  between the two, and those that began before ``calls[i]`` and ended
  after it began. `span`: `longest` of `calls`, which bounds how far back
  a call can have begun and still be running (the walk back stops there).
  """
  a = calls[i]
  floor = a.start_ns - span
  k = i - 1
  while k >= 0 and calls[k].start_ns >= floor:
    if calls[k].end_ns > a.start_ns:
      yield k
    k -= 1
  yield from range(i + 1, j)
