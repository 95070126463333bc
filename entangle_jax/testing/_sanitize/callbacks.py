"""Host callbacks (``jax.experimental.io_callback``, ``jax.pure_callback``,
``jax.debug.callback``) as the sanitizer records them.

jaxlib registers the host-callback FFI targets when it loads, before any
sanitizer starts, so their handlers cannot run through a trampoline.
Instead, while the compile hook is in place (`sites`), each Python
callable a module hands to XLA (``compile_or_get_cached``'s
``host_callbacks``, which the callback's custom call names by its
``index`` attribute) is replaced by a recorder that knows the call's place
in the module. A recorder records, while recording is on, the thread, and
start and end on the native records' clock (the extension's ``now_ns``:
``std::chrono::steady_clock``, which is ``time.monotonic_ns`` on Linux).

XLA's id of the execution is not known inside a callback. On one CPU
device the compile hook hands it over: each callback's custom call takes
XLA's run id and its own site number as two more operands
(`sites.route_executions`), which `execution_recorder` takes off and
records. Elsewhere a recorder counts its own calls instead
(`recorder`), and the k-th call of each place outside
every loop and branch of one module is taken for one execution
(``run_id`` -1 - k). A call in a loop or a branch may run many times in
one execution, or not at all: it is recorded with ``UNKNOWN_RUN``, and
`host_placement.place_host_calls` places it in an execution only where the
records leave one choice (the module ran once, or its executions ran one
after the other on one thread).
"""

from __future__ import annotations

import array
import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

from entangle_jax.testing._sanitize import jax_hooks

_lock = threading.Lock()
_recording = False
_sites: list[Any] = []
"""Each record's site."""
_numbers = array.array("q")
"""Each record's (thread, start_ns, end_ns, run_id, failed), one after
the other: a million records are read as columns at the block's end
(`columns.HostRecords`) without a Python object each."""
FIELDS = 5
UNKNOWN_RUN = 0
"""The run id of a host callback whose execution its recorder cannot
know (a call in a loop or a branch)."""
SEQUENCE_RUN = -(1 << 62)
"""The run id `host_placement.place_host_calls` gives every host callback of a
module on one accelerator device whose executions nothing counted: they
ran one after another in the device's stream, so its calls, in order of
start, are one sequence of iterations, but not split into executions."""


def set_recording(on: bool) -> None:
  """Starts (True) or stops (False) recording host callbacks."""
  global _recording
  _recording = on


def drain() -> tuple[list[Any], array.array]:
  """The records since the last drain: each record's site, and each
  record's (thread, start_ns, end_ns, run_id, failed), one after the
  other (`FIELDS` numbers a record)."""
  global _sites, _numbers
  with _lock:
    out = _sites, _numbers
    _sites, _numbers = [], array.array("q")
  return out


def _now() -> Callable[[], int]:
  from entangle_jax.testing._sanitize import wrapping

  return wrapping.native().now_ns


def recorder(fn: Callable[..., Any], site: Any) -> Callable[..., Any]:
  """`fn`, recording each call (with `site`, a `sites.CallSite`) while
  recording is on."""
  return _recording_with(fn, lambda: site)


def _recording_with(
  fn: Callable[..., Any], site_now: Callable[[], Any]
) -> Callable[..., Any]:
  """`fn`, recording each call while recording is on, at the site
  `site_now` gives at the time of the call (None: not recorded)."""
  now = _now()
  counter = itertools.count()

  def recorded(*args: Any, **kwargs: Any) -> Any:
    site = site_now()
    if not _recording or site is None:
      return fn(*args, **kwargs)
    # A call outside every loop and branch is one execution of its own
    # (numbered apart, below zero); the others' execution is unknown.
    run_id = -1 - next(counter) if not site.context else UNKNOWN_RUN
    return _timed(fn, args, kwargs, site, run_id, now)

  return recorded


def _timed(fn, args, kwargs, site: Any, run_id: int, now) -> Any:
  """``fn(*args, **kwargs)``, recorded at `site` in execution `run_id`:
  its thread, start and end (`now`), and whether it raised."""
  thread = threading.get_native_id()
  start = now()
  failed = True
  try:
    out = fn(*args, **kwargs)
    failed = False
    return out
  finally:
    end = now()
    # Under the lock: another thread between the two appends (or a drain
    # swapping the lists) would pair one call's site with another's
    # numbers.
    with _lock:
      _sites.append(site)
      _numbers.extend((thread, start, end, run_id, failed))


def execution_recorder(
  fn: Callable[..., Any], site_of: Callable[[int], Any]
) -> Callable[..., Any]:
  """`fn`, called as XLA calls a host callback whose custom call the
  sanitizer gave two more operands (`sites.route_executions`: XLA's run id
  of the execution, and the call's site number): they are taken off
  before `fn` sees the arguments, always (a module compiled in a block may
  run after it), and, while recording is on, the call is recorded at the
  site `site_of` gives for its number, in that execution. One callable of
  a module may be called from several places (a function lowered once and
  called twice, a recomputed checkpoint): each call says which."""
  now = _now()

  def recorded(*given: Any, **kwargs: Any) -> Any:
    *args, run_id, number = given
    if not _recording:
      return fn(*args, **kwargs)
    site = site_of(int(number))
    if site is None:
      return fn(*args, **kwargs)
    return _timed(fn, args, kwargs, site, int(run_id), now)

  return recorded


class Place:
  """A site given later: a TPU callback is wrapped as it is lowered, and
  gets its place when its module is compiled (`sites`)."""

  site: Any = None


def late_recorder(fn: Callable[..., Any], place: Place) -> Callable[..., Any]:
  """`fn`, recording each call while recording is on once `place` has a
  site (a callback whose module never got one records nothing)."""
  return _recording_with(fn, lambda: place.site)


_NOT_USER_MODULES = (
  "jax.",
  "jaxlib.",
  "entangle_jax._src.",
  "entangle_jax.testing._",
)
"""Modules whose callables are wrappers around the user's host callback:
JAX's (``_FlatCallback``, ``_wrapped_callback``, ...) and this package's
internals (a recorder)."""


def function_name(fn: Any, depth: int = 8) -> str | None:
  """The user's callable inside JAX's wrappers of a host callback, named
  (best effort; None when none is found):

  * a function or method: its qualified name (``Store.write``);
  * a lambda: its qualified name with its file and line
    (``test.<locals>.<lambda> (/path/test.py:12)``), as lambdas share
    one name;
  * a callable object: its class's qualified name;
  * ``jax.debug.print``: its format string (``jax.debug.print('x={}')``).

  JAX's wrappers are searched breadth first, outermost first, through
  closures and the attributes that hold what they wrap.
  """
  seen: set[int] = set()
  frontier = [fn]
  for _ in range(depth):
    nxt = []
    for f in frontier:
      if id(f) in seen:
        continue
      seen.add(id(f))
      printed = _debug_print_format(f)
      if printed is not None:
        return f"jax.debug.print({printed!r})"
      name = _user_name(f)
      if name is not None:
        return name
      nxt.extend(_wrapped(f))
    frontier = nxt
  return None


def _module_of(f: Any) -> str:
  module = getattr(f, "__module__", None)
  if not isinstance(module, str):
    module = type(f).__module__
  return module or ""


def _user_name(f: Any) -> str | None:
  """`f`'s name where it is the user's callable, else None (a wrapper of
  JAX's or this package's, a partial, or a class that a wrapper's closure
  holds)."""
  if isinstance(f, (functools.partial, type)):
    return None
  if f"{_module_of(f)}.".startswith(_NOT_USER_MODULES):
    return None
  code = getattr(f, "__code__", None)
  qualname = getattr(f, "__qualname__", None) or getattr(f, "__name__", None)
  if isinstance(qualname, str):
    if getattr(f, "__name__", None) == "<lambda>" and code is not None:
      return f"{qualname} ({code.co_filename}:{code.co_firstlineno})"
    return qualname
  if callable(f):  # An object with __call__: its class names it.
    return type(f).__qualname__
  return None


def _wrapped(f: Any) -> list[Any]:
  """What `f` wraps: JAX's wrappers hold it in a closure cell or an
  attribute (``callback_func``, ``__wrapped__``); a partial in ``func``."""
  inner = []
  for attribute in ("callback_func", "func", "__wrapped__"):
    value = getattr(f, attribute, None)
    if callable(value):
      inner.append(value)
  for cell in getattr(f, "__closure__", None) or ():
    try:
      value = cell.cell_contents
    except ValueError:
      continue
    if callable(value):
      inner.append(value)
  return inner


def _debug_print_format(f: Any) -> str | None:
  """The format string of a ``jax.debug.print``, where `f` is the partial
  JAX makes of its printing function with the format first; else None."""
  if not isinstance(f, functools.partial) or not f.args:
    return None
  func = f.func
  if (
    getattr(func, "__name__", None) == jax_hooks.DEBUG_PRINT_CALLBACK
    and _module_of(func) == jax_hooks.DEBUG_PRINT_MODULE
    and isinstance(f.args[0], str)
  ):
    return f.args[0]
  return None
