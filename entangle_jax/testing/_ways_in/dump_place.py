"""Where a new dump directory goes.

When XLA dumps, it writes a dozen files or more for each module it
compiles (LLVM IR, object files, the compile's inputs, the module before
and after optimization), and that writing is most of what the race check
adds to a test suite's time. On a tmpfs it costs about a third less than
on a disk (docs/performance.md), so the pytest plugin's own dump, which it
prunes as the run goes and removes at the end, goes on one where one is
usable. `race_check`'s dump stays off it: it is pruned too, but kept for
the rest of the process (XLA keeps dumping there) and, where something
raced, after it; on a tmpfs it would hold memory until deleted.
"""

from __future__ import annotations

import os
import pathlib
import shutil

TMPFS = pathlib.Path("/dev/shm")
"""The tmpfs a dump may go on: Linux mounts one here for POSIX shared
memory (Docker and Podman too, 64 MB by default)."""

MIN_FREE = 1 << 30
"""The free space (bytes) `TMPFS` must have for a dump to go there: 1 GiB.
Between two checks XLA writes every file of the modules one test compiles,
and a module XLA could not write is a module the check never sees; a
tmpfs of a few tens of MB (Docker's default) could fill, where 1 GiB is
many times the whole unpruned dump of a 74-test suite (75 MB for 623
modules, docs/performance.md)."""

TEMP_ENV = ("TMPDIR", "TEMP", "TMP")
"""The variables `tempfile` takes the temporary directory from: one that is
set is the user's choice of where temporary files go, and it stands."""


def free_bytes(folder: pathlib.Path) -> int:
  """The bytes an unprivileged process may still write under `folder`."""
  return shutil.disk_usage(folder).free


def usable_tmpfs() -> pathlib.Path | None:
  """`TMPFS` if a dump can go there: a directory this process may create
  files in, with at least `MIN_FREE` bytes free; else None."""
  try:
    if not TMPFS.is_dir() or not os.access(TMPFS, os.W_OK | os.X_OK):
      return None
    return TMPFS if free_bytes(TMPFS) >= MIN_FREE else None
  except OSError:
    return None


def dump_parent(*, tmpfs: bool = False) -> pathlib.Path | None:
  """The directory a new dump directory goes in; None for `tempfile`'s
  temporary directory. The first that applies:

  1. Bazel's ``TEST_UNDECLARED_OUTPUTS_DIR`` under ``bazel test``, so that
     the dump stays with the test's outputs.
  2. None when ``TMPDIR``, ``TEMP`` or ``TMP`` is set (`TEMP_ENV`): the
     user chose where temporary files go (which is also how to keep a dump
     off the tmpfs, or put it on another).
  3. With `tmpfs` (a dump its owner prunes and removes), `usable_tmpfs`.
  4. None.
  """
  outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
  if outputs:
    return pathlib.Path(outputs)
  if not tmpfs or any(os.environ.get(name) for name in TEMP_ENV):
    return None
  return usable_tmpfs()


KEPT_DUMPS = 5
"""How many kept dumps of earlier runs stay in one folder: a dump kept for
the user (a module raced, or could not be checked) is named in the report
and stays for reading, but a suite run again and again (a binding's test
that shows a race on purpose) would pile them up. Each new dump removes
the older ones beyond the newest `KEPT_DUMPS`."""

IDLE_SECONDS = 3600
"""A kept dump changed within the last hour is never removed, whatever its
rank: it may belong to a run still going (another pytest, an xdist worker
that is still writing)."""


def _last_change(dump: pathlib.Path) -> float:
  """When `dump` or a folder or file directly in it last changed (an xdist
  run's workers dump into folders of their own below it)."""
  times = [dump.stat().st_mtime]
  with os.scandir(dump) as entries:
    times.extend(e.stat(follow_symlinks=False).st_mtime for e in entries)
  return max(times)


def remove_stale_dumps(
  folder: pathlib.Path, prefix: str, now: float
) -> list[pathlib.Path]:
  """Removes the dumps (folders named `prefix`...) in `folder` beyond the
  `KEPT_DUMPS` newest that have not changed for `IDLE_SECONDS`; returns
  them. Anything else in `folder` is left alone, and so is whatever
  cannot be read or removed."""
  dumps = []
  try:
    with os.scandir(folder) as entries:
      for entry in entries:
        if entry.name.startswith(prefix) and entry.is_dir(
          follow_symlinks=False
        ):
          path = pathlib.Path(entry.path)
          try:
            dumps.append((_last_change(path), path))
          except OSError:
            continue
  except OSError:
    return []
  dumps.sort(reverse=True)
  removed = []
  for changed, path in dumps[KEPT_DUMPS:]:
    if now - changed >= IDLE_SECONDS:
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed
