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

import importlib.metadata
import os
import pathlib
import re
import shlex
import shutil
import tempfile
import time

from entangle_jax.testing._findings.records import Coverage, ModuleResult, Run
from entangle_jax.testing._ways_in import dump_place, module_files

_DUMP_FLAG = re.compile(r"--xla_dump_to=(\S+)")
_MODULE_PREFIX = re.compile(r"module_\d+\.")
_OPTIMIZED_END = module_files.OPTIMIZED.removeprefix("*")
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


def module_prefix(path: pathlib.Path) -> tuple[pathlib.Path, str]:
  """The folder of a module's file and the prefix all its files share
  (``module_0007.``; the whole name when it has none)."""
  found = _MODULE_PREFIX.match(path.name)
  return path.parent, found.group(0) if found else path.name


def size(folder: pathlib.Path) -> tuple[int, int]:
  """The number of files under `folder`, and their bytes."""
  files = [p for p in folder.rglob("*") if p.is_file()]
  return len(files), sum(p.stat().st_size for p in files)


def requested_dump() -> pathlib.Path | None:
  """The directory ``XLA_FLAGS`` asks XLA to dump to, if any."""
  found = _DUMP_FLAG.findall(os.environ.get("XLA_FLAGS", ""))
  return pathlib.Path(found[-1]) if found else None


def new_dump(
  prefix: str = "entangle-races-", *, tmpfs: bool = False
) -> pathlib.Path:
  """A new directory for a dump: below Bazel's
  ``TEST_UNDECLARED_OUTPUTS_DIR`` under ``bazel test``, so that it stays
  with the test's outputs, else a temporary one; with `tmpfs` (a dump its
  owner prunes and removes), on a tmpfs when one is usable and the user
  did not choose the temporary directory (`dump_place.dump_parent`).
  Earlier runs' dumps kept in the same folder beyond the newest few are
  removed first (`dump_place.remove_stale_dumps`); Bazel's outputs folder
  is Bazel's to clean."""
  parent = dump_place.dump_parent(tmpfs=tmpfs)
  try:
    return _made_in(parent, prefix)
  except OSError:
    if parent != dump_place.TMPFS:
      raise
  # The tmpfs refused after all (filled, or its permissions changed):
  # the temporary directory, as without it.
  return _made_in(None, prefix)


def _made_in(parent: pathlib.Path | None, prefix: str) -> pathlib.Path:
  folder = pathlib.Path(tempfile.gettempdir()) if parent is None else parent
  if str(folder) != os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR"):
    dump_place.remove_stale_dumps(folder, prefix, time.time())
  return pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


LEAN_FLAGS = ("--xla_dump_buffer_assignment_analysis=false",)
"""What makes XLA write less for each module of a dump that only the check
reads: of the four buffer-assignment reports XLA writes beside each
optimized module, the two that flag governs (``-buffer-assignment-values``
and ``-live-range``). The rest of what XLA writes for a module (the module
before optimization, LLVM IR and object files, the compile's inputs, the
other two reports) no flag of XLA's turns off without turning off the
optimized module too. Never ``--xla_dump_disable_metadata``: the check reads
the metadata."""


LEAN_FLAGS_FROM = (0, 10)
"""The first jaxlib whose XLA is known to take `LEAN_FLAGS` (0.10.2 and
0.12 do; 0.6.2's does not, and XLA aborts the process on a flag it does
not know)."""


def _knows_lean_flags() -> bool:
  """Whether the installed jaxlib's XLA takes `LEAN_FLAGS`, from its
  version (read without importing it: the flags must be set before)."""
  try:
    version = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return False
  numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
  return numbers >= LEAN_FLAGS_FROM


_OWN: set[pathlib.Path] = set()
# The dumps `request_dump` made in this process (XLA keeps dumping into
# one for the rest of the process, whoever asked first).


def own(dump: pathlib.Path) -> bool:
  """Whether `dump` is one `request_dump` made in this process: the
  check's alone, which it may prune (a dump the user asked for is
  left whole)."""
  return dump in _OWN


def remove_if_empty(dump: pathlib.Path) -> bool:
  """Removes `dump` when no file is left in it (folders only: pruning
  left nothing to show); returns whether it did."""
  if not dump.is_dir() or any(p.is_file() for p in dump.rglob("*")):
    return False
  shutil.rmtree(dump, ignore_errors=True)
  return True


def request_dump(
  prefix: str = "entangle-races-",
  into: pathlib.Path | None = None,
  *,
  tmpfs: bool = False,
  large_constants: bool = False,
) -> pathlib.Path:
  """Makes XLA dump every optimized module as text; returns where.

  With `large_constants`, every constant is written in full
  (``--xla_dump_large_constants``): the cross-rank check compares the
  ranks' constants, and XLA otherwise writes a large one as ``{...}``.

  With `into`, there (any dump ``XLA_FLAGS`` asked for is replaced: a
  pytest-xdist worker's dump of its own). Otherwise a dump ``XLA_FLAGS``
  already asks for is kept (text added if it lacks it), else a new
  directory goes in (`new_dump`; with `tmpfs`, on a tmpfs if usable).
  When ``XLA_FLAGS`` asked for no dump, the dump is the check's alone, and
  XLA is also asked to leave out what the check does not read
  (`LEAN_FLAGS`, each unless ``XLA_FLAGS`` sets it already, where this
  jaxlib takes them); a dump the user asked for gets everything XLA
  writes.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  dump = requested_dump()
  lean = dump is None
  if into is not None:
    into.mkdir(parents=True, exist_ok=True)
    flags = _DUMP_FLAG.sub("", flags)
    dump = into
    flags = f"{flags} --xla_dump_to={shlex.quote(str(dump))}"
  elif dump is None:
    dump = new_dump(prefix, tmpfs=tmpfs)
    _OWN.add(dump)
    flags = f"{flags} --xla_dump_to={shlex.quote(str(dump))}"
  if "--xla_dump_hlo_as_text" not in flags:
    flags += " --xla_dump_hlo_as_text"
  if large_constants and "--xla_dump_large_constants" not in flags:
    flags += " --xla_dump_large_constants"
  if lean and _knows_lean_flags():
    for flag in LEAN_FLAGS:
      if flag.split("=")[0] not in flags:
        flags += f" {flag}"
  os.environ["XLA_FLAGS"] = flags.strip()
  return dump


def optimized_files(folder: pathlib.Path) -> list[pathlib.Path]:
  """The optimized modules' files under `folder` (what
  ``folder.rglob(module_files.OPTIMIZED)`` finds), in one walk of
  `os.scandir` that reads each folder once: a watch looks after every
  test, and a dump it does not prune keeps every module's dozen files."""
  found = []
  pending = [str(folder)]
  while pending:
    try:
      with os.scandir(pending.pop()) as entries:
        for entry in entries:
          if entry.is_dir(follow_symlinks=False):
            pending.append(entry.path)
          elif entry.name.endswith(_OPTIMIZED_END):
            found.append(pathlib.Path(entry.path))
    except OSError:  # Gone, or unreadable: as rglob, nothing there.
      continue
  return found


class DumpWatch:
  """The modules dumped to one directory since the watch began, checked.

  Attributes:
    dump: the directory.
    results: `ModuleResult` of every module checked so far.
    prune: whether the files of a module checked free of races are deleted
      once checked (all of one module's files share its ``module_NNNN.``
      prefix): what stays is what raced, or what could not be checked.
  """

  def __init__(self, dump: pathlib.Path, prune: bool = False):
    _listen()
    self.dump = dump
    self.prune = prune
    self._seen = set(self._files())
    self._start = dict(_counts)
    self.results: list[ModuleResult] = []
    # The prefixes of the modules checked so far, racing or clean, and how
    # many results they cover: kept up as results come, not recomputed.
    self._racing: set[tuple[pathlib.Path, str]] = set()
    self._clean: set[tuple[pathlib.Path, str]] = set()
    self._sorted = 0

  def _files(self) -> list[pathlib.Path]:
    return sorted(optimized_files(self.dump))

  def new_results(self) -> list[ModuleResult]:
    """Checks the modules dumped since the last call (a module that
    cannot be checked is among them, with its reason)."""
    found = [p for p in self._files() if p not in self._seen]
    self._seen.update(found)
    if not found:
      return []
    results = module_files.check([str(p) for p in found])
    self.results += results
    self.finish()
    return results

  def _delete(self, prefixes: set[tuple[pathlib.Path, str]]) -> None:
    """Deletes the files of the modules `prefixes` name (each a folder and
    a ``module_NNNN.`` prefix)."""
    for folder in {f for f, _ in prefixes}:
      names = {p for f, p in prefixes if f == folder}
      try:
        with os.scandir(folder) as listing:
          entries = list(listing)
      except OSError:
        continue
      for entry in entries:
        prefix = _MODULE_PREFIX.match(entry.name)
        if prefix and prefix.group(0) in names:
          if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
          else:
            pathlib.Path(entry.path).unlink(missing_ok=True)

  def finish(self) -> None:
    """Deletes the files of the modules checked free of races (a pruning
    watch's step after each check, and its last, for the files XLA wrote
    after the check); never one a racing or unchecked module shares its
    prefix with."""
    if not self.prune or not self.dump.is_dir():
      return
    for result in self.results[self._sorted :]:
      sort = self._racing if result.races or result.unchecked else self._clean
      sort.add(module_prefix(pathlib.Path(result.path)))
    self._sorted = len(self.results)
    self._delete(self._clean - self._racing)

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
