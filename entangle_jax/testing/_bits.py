"""Sets of small integers as Python ints: one bit per member.

`entangle_jax.testing._reach` keeps, per op, the set of ops ordered before
and after it as such masks: a union of two sets is one big-integer OR, done
a machine word at a time.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Generator, Iterable
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


def mask_of(positions: Iterable[int]) -> int:
  """The int whose set bits are `positions`, in time linear in them."""
  positions = list(positions)
  if not positions:
    return 0
  raw = bytearray(max(positions) // 8 + 1)
  for p in positions:
    raw[p >> 3] |= 1 << (p & 7)
  return int.from_bytes(raw, "little")


def positions(mask: int) -> list[int]:
  """The set bits of `mask`, ascending."""
  if not mask:
    return []
  if mask.bit_count() <= 16:  # Few members: peel the lowest bit off.
    found = []
    while mask:
      low = mask & -mask
      found.append(low.bit_length() - 1)
      mask ^= low
    return found
  text = bin(mask)[:1:-1]  # Bit 0 first.
  found = []
  at = text.find("1")
  while at >= 0:
    found.append(at)
    at = text.find("1", at + 1)
  return found


@contextlib.contextmanager
def gc_paused() -> Generator[None]:
  """Pauses Python's cyclic garbage collector while the block runs.

  The analysis allocates many small objects and makes no reference cycles.
  Each of those allocations can trigger a collection that walks every
  object of the process, and after tracing and compiling a big program
  there are hundreds of thousands: with the collector running, analysing a
  module of 2000 native calls took about twice as long.
  """
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def without_gc(fn: Callable[_P, _R]) -> Callable[_P, _R]:
  """`fn`, run with the garbage collector paused (`gc_paused`)."""

  @functools.wraps(fn)
  def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
    with gc_paused():
      return fn(*args, **kwargs)

  return paused
