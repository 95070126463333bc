"""Python's cyclic garbage collector, paused while the analysis runs."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Generator
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextlib.contextmanager
def gc_paused() -> Generator[None]:
  """Pauses Python's cyclic garbage collector while the block runs.

  The analysis allocates many small objects and makes no reference cycles.
  Each of those allocations can trigger a collection that walks every
  object of the process, and after tracing and compiling a big program
  there are hundreds of thousands, so collections would take much of the
  analysis's time.
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
