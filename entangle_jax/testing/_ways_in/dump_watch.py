"""Watching the modules XLA dumps as a process compiles them.

Both ways of switching the race check on for a run (the pytest plugin and
`entangle_jax.testing.race_check`) work the same way: they ask XLA to dump
every optimized module (``--xla_dump_to``), then check the files that
appeared since they last looked. XLA reads ``XLA_FLAGS`` when its backend
starts, so the request only takes effect if nothing has compiled yet; the
compiles JAX reports (`jax.monitoring`) tell a watch that saw nothing
because the dump came too late from one that had nothing to see.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import tempfile

from entangle_jax.testing._report.findings import Coverage, ModuleResult, Run
from entangle_jax.testing._ways_in import module_files

_DUMP_FLAG = re.compile(r"--xla_dump_to=(\S+)")
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The duration JAX records for each module it hands to XLA: compiled, or
loaded from the persistent cache (which also records a cache hit)."""
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

_counts = {"compiles": 0, "cache_hits": 0}
_listening = False


def _listen() -> None:
  """Counts compiles and cache hits from now on (once per process)."""
  global _listening
  if _listening:
    return
  import jax.monitoring

  # Parameter names as JAX's listener protocols spell them.
  def duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == BACKEND_COMPILE_EVENT:
      _counts["compiles"] += 1

  def happened(event: str, **kwargs: str | int) -> None:
    if event == CACHE_HIT_EVENT:
      _counts["cache_hits"] += 1

  jax.monitoring.register_event_duration_secs_listener(duration)
  jax.monitoring.register_event_listener(happened)
  _listening = True


def requested_dump() -> pathlib.Path | None:
  """The directory ``XLA_FLAGS`` asks XLA to dump to, if any."""
  found = _DUMP_FLAG.findall(os.environ.get("XLA_FLAGS", ""))
  return pathlib.Path(found[-1]) if found else None


def request_dump(prefix: str = "entangle-races-") -> pathlib.Path:
  """Makes XLA dump every optimized module as text; returns where.

  A dump ``XLA_FLAGS`` already asks for is kept (text added if it lacks
  it); otherwise a new directory goes in: below Bazel's
  ``TEST_UNDECLARED_OUTPUTS_DIR`` under ``bazel test``, so that it stays
  with the test's outputs, else a temporary one.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  dump = requested_dump()
  if dump is None:
    parent = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or None
    dump = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    flags = f"{flags} --xla_dump_to={shlex.quote(str(dump))}"
  if "--xla_dump_hlo_as_text" not in flags:
    flags += " --xla_dump_hlo_as_text"
  os.environ["XLA_FLAGS"] = flags.strip()
  return dump


class DumpWatch:
  """The modules dumped to one directory since the watch began, checked.

  Attributes:
    dump: the directory.
    results: `ModuleResult` of every module checked so far.
  """

  def __init__(self, dump: pathlib.Path):
    _listen()
    self.dump = dump
    self._seen = set(self._files())
    self._start = dict(_counts)
    self.results: list[ModuleResult] = []

  def _files(self) -> list[pathlib.Path]:
    return sorted(self.dump.rglob(module_files.OPTIMIZED))

  def new_results(self) -> list[ModuleResult]:
    """Checks the modules dumped since the last call.

    Raises:
      module_files.CannotAnswer: a module cannot be read or parsed.
    """
    found = [p for p in self._files() if p not in self._seen]
    self._seen.update(found)
    if not found:
      return []
    results = module_files.check([str(p) for p in found])
    self.results += results
    return results

  def compiles(self) -> int:
    """Modules JAX handed to XLA since the watch began, cache hits
    included."""
    return _counts["compiles"] - self._start["compiles"]

  def cache_hits(self) -> int:
    """Compiles JAX served from its persistent cache since the watch
    began."""
    return _counts["cache_hits"] - self._start["cache_hits"]

  def unchecked(self) -> int:
    """Cache hits that left no module to check. XLA dumps the module it
    loads from the cache (its file names no platform), so a hit is
    usually checked too."""
    loaded = sum(1 for r in self.results if r.platform is None)
    return max(0, self.cache_hits() - loaded)

  def blind(self) -> bool:
    """Whether XLA compiled while nothing was dumped: its backend started
    before the dump was asked for, so the watch sees nothing. (Cache hits
    that left no module are `unchecked`: older XLA dumps nothing for a
    module it loads from the cache, even when the dump works.)"""
    return not self.results and self.compiles() > self.cache_hits()

  def incomplete(self) -> bool:
    """Whether some compile went unchecked: nothing was dumped at all
    (`blind`), or a cache hit left no module (`unchecked`)."""
    return self.blind() or self.unchecked() > 0

  def coverage(self) -> Coverage:
    """What the watch could not see, as data (the text emitter says it)."""
    blind = self.blind()
    return Coverage(
      blind=blind,
      replaced=blind and requested_dump() != self.dump,
      cache_hits=self.cache_hits(),
      unchecked=self.unchecked(),
    )

  def run(self) -> Run:
    """The modules checked so far, and the coverage."""
    return Run(self.results, self.coverage())
