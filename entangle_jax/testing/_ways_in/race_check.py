"""`race_check`: the race check on whatever a block of code compiles.

For test runners other than pytest (absltest, Bazel ``py_test``) and for
plain programs. In one line, for a whole absltest run::

  if __name__ == "__main__":
    with race_check():
      absltest.main()

or per test, in ``setUp``: ``self.enter_context(race_check())``.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import TextIO

from entangle_jax.testing._emitters import formats, sentences
from entangle_jax.testing._findings.records import ModuleResult
from entangle_jax.testing._ways_in import dump_watch as _dump_watch

ENV = "ENTANGLE_JAX_RACES"
"""The environment variable that picks the mode when the code does not:
``fail``, ``report`` or ``off``."""
MODES = ("fail", "report", "off")


class RaceCheckError(AssertionError):
  """Modules compiled inside a `race_check` race, or could not be seen.

  Attributes:
    results: what the check found in each module.
  """

  def __init__(self, message: str, results: list[ModuleResult]):
    super().__init__(message)
    self.results = results


def _mode(mode: str | None) -> str:
  chosen = mode if mode is not None else os.environ.get(ENV) or "fail"
  if chosen not in MODES:
    source = "race_check: mode" if mode is not None else f"${ENV}"
    raise ValueError(
      f"{source} must be one of {', '.join(MODES)}, not {chosen!r}"
    )
  return chosen


class race_check:  # A context manager named as a function, like contextlib's.
  """Checks every module XLA compiles inside the block for races.

  On leaving the block, each optimized module compiled inside it is
  checked as ``python -m entangle_jax.testing`` checks a dump (the
  project's declarations applied), and the report goes to `stream`.

  * ``mode="fail"`` (the default): races, modules the check could not
    answer for (each named with its reason; every other module is still
    checked), or compiles the check could not see, raise
    `RaceCheckError`. A block left by ``SystemExit`` with
    status 0 (``absltest.main()``) exits with status 1 instead; any other
    exception passes through, after the report.
  * ``mode="report"``: only the report.
  * ``mode="off"``: nothing at all.

  Without `mode`, the environment variable ``ENTANGLE_JAX_RACES`` picks
  one (``fail`` when unset), so that a run can switch the check off or to
  ``report`` without changing code (Bazel: ``env = {...}``).

  The check sees a module only if XLA dumps it: a block entered before
  anything compiled asks XLA for a dump (``--xla_dump_to``, a temporary
  directory, or one under Bazel's ``TEST_UNDECLARED_OUTPUTS_DIR``), or
  uses the one ``XLA_FLAGS`` already names. A dump of its own keeps only
  the files of modules that raced or could not be checked (each module's
  files go once it is checked clean), and is removed on leaving the
  block when nothing is left; a dump ``XLA_FLAGS`` names is left whole.
  Entered after the backend started without a dump, it sees nothing and
  says so (a failure in ``fail`` mode): it never passes what it did not
  see.

  Attributes:
    mode: the mode in effect.
    results: after the block, what the check found in each module.

  Raises:
    ValueError: `mode` (or ``ENTANGLE_JAX_RACES``) is not a mode, or
      `format` not a format.
  """

  def __init__(
    self,
    mode: str | None = None,
    *,
    stream: TextIO | None = None,
    format: str = "text",
  ):
    self.mode = _mode(mode)
    self.format = formats.check_name(format, "race_check").name
    self._stream = stream
    self._watch: _dump_watch.DumpWatch | None = None
    self.results: list[ModuleResult] = []

  def __enter__(self) -> race_check:
    if self.mode != "off":
      dump = _dump_watch.request_dump()
      self._watch = _dump_watch.DumpWatch(dump, prune=_dump_watch.own(dump))
    return self

  def __exit__(
    self,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
  ) -> bool:
    watch = self._watch
    if watch is None:
      return False
    self._watch = None
    watch.new_results()
    run = watch.run()
    self.results = list(run.results)
    # As before: a module reported (racing, not checked, or with pairs
    # left out as safe) or a compile not seen fails the block.
    problems = run.coverage.incomplete or any(r.reported for r in run.results)
    report = formats.render("text", run)
    shown = report
    if self.format != "text":
      shown = f"{formats.render(self.format, run)}\n{sentences.summary(run)}"
    stream = self._stream or sys.stderr
    if watch.prune and not run.racing and not run.unchecked:
      # The check's own dump, pruned of what passed: nothing left to show
      # (a later block in this process dumps there again).
      _dump_watch.remove_if_empty(watch.dump)
    print(f"entangle-jax race check ({watch.dump}):\n{shown}", file=stream)
    if self.mode != "fail" or not problems:
      return False
    if exc_type is None:
      raise RaceCheckError(report, self.results)
    if issubclass(exc_type, SystemExit) and getattr(exc, "code", 1) in (
      0,
      None,
    ):
      raise SystemExit(1)
    return False
