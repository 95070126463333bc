"""``pytest --entangle-sanitize``: each test's call runs under `sanitize`.

`register` (from the plugin's ``pytest_configure``) starts the sanitizer
before any test module is imported, so that the FFI targets a test suite's
libraries register at import are wrapped, then registers `SanitizePlugin`.
A test in which a race was seen fails, with the sanitizer's report, unless
it is marked ``entangle_races_expected`` (a control that races on purpose);
contradictions of the declarations are reported with the test's output and
fail it too. A test that called targets the sanitizer did not observe
(registered before it started) is listed in the terminal summary, and
fails under ``--entangle-sanitize=strict``. Under pytest-xdist each worker
does the same for its tests, and hands its list of such tests to the
controller (``workeroutput``, as the race check hands its findings), whose
summary is the one shown.

``--entangle-watchdog=SECONDS`` runs each test's block with the watchdog
(``--entangle-watchdog-exit``: ending the process at a hang).
``--entangle-sanitize-ranks=DIR``, one pytest a rank under ``mpirun``,
records each rank's communicating calls to ``DIR/rankR``; at the end each
rank marks its record final, and rank 0 waits for every rank's (final,
or hung) record of this launch, merges them (`rank_calls`), prints the
merge in its summary and fails a run whose ranks differ, hung, or did not
finish within the wait.
"""

from __future__ import annotations

import pathlib
import time
from typing import Protocol

import pytest

from entangle_jax.testing._sanitize import rank_calls, session

EXPECTED = "entangle_races_expected"
OUTPUT = "entangle_sanitize_unobserved"
"""The key of an xdist worker's ``workeroutput`` that carries its tests
that called unobserved targets: a list of [node id, [target, ...]]
(plain lists: execnet sends them as they are)."""
_SEEN = pytest.StashKey[session.Seen]()


class Ranks(Protocol):
  """This rank's place in a launch (`Ranks`)."""

  rank: int
  size: int
  folder: pathlib.Path
  launch: str

  def dump(self, rank: int | None = None) -> pathlib.Path: ...


def register(
  config: pytest.Config,
  strict: bool = False,
  watchdog: float | None = None,
  on_hang: str = "report",
  ranks: Ranks | None = None,
  ranks_timeout_s: float = 300.0,
) -> None:
  """Starts the sanitizer and adds the per-test hooks to `config`
  (`strict`: a test that called an unobserved target fails; `watchdog`,
  `on_hang`: each test's ``sanitize`` arguments; `ranks`: this rank's
  place, whose communicating calls go to its folder; `ranks_timeout_s`:
  how long rank 0 waits for the other ranks' records)."""
  session.start()
  plugin = SanitizePlugin(strict, watchdog, on_hang, ranks, ranks_timeout_s)
  config.pluginmanager.register(plugin, "entangle-sanitize")


class SanitizePlugin:
  """The per-test hooks of ``--entangle-sanitize``."""

  def __init__(
    self,
    strict: bool = False,
    watchdog: float | None = None,
    on_hang: str = "report",
    ranks: Ranks | None = None,
    ranks_timeout_s: float = 300.0,
  ):
    self.strict = strict
    self.ranks_timeout_s = ranks_timeout_s
    self.watchdog = watchdog
    self.on_hang = on_hang
    self.ranks = ranks
    self.merged: rank_calls.SanitizedRanks | None = None
    self.late: list[int] = []
    self.unobserved: list[tuple[str, list[str]]] = []

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_call(self, item: pytest.Item):
    folder = None if self.ranks is None else self.ranks.folder
    with session.sanitize(
      watchdog=self.watchdog, on_hang=self.on_hang, ranks=folder
    ) as seen:
      yield
    item.stash[_SEEN] = seen

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_makereport(self, item: pytest.Item, call):
    outcome = yield
    if call.when != "call":
      return
    seen = item.stash.get(_SEEN, None)
    if seen is None:
      return
    report = outcome.get_result()
    text = session.format_seen(seen)
    report.sections.append(("entangle-jax sanitizer", text))
    expected = item.get_closest_marker(EXPECTED) is not None
    if (seen.races or seen.contradictions) and not expected and report.passed:
      report.outcome = "failed"
      report.longrepr = (
        f"entangle-jax sanitizer: {len(seen.races)} races and "
        f"{len(seen.contradictions)} contradictions seen in this test\n" + text
      )
    if seen.not_observed:
      self.unobserved.append((item.nodeid, seen.not_observed))
      if self.strict and report.passed:
        report.outcome = "failed"
        report.longrepr = (
          "entangle-jax sanitizer (strict): this test called targets it did "
          "not observe, so their races cannot be seen: "
          + ", ".join(seen.not_observed)
          + "\nStart the sanitizer before the library registers them "
          "(import it in the test, not in a conftest.py imported earlier).\n"
          + text
        )

  def pytest_sessionfinish(self, session: pytest.Session) -> None:
    if self.ranks is not None:
      self._across_ranks(session)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # An xdist worker: to the controller.
      workeroutput[OUTPUT] = [
        [nodeid, list(targets)] for nodeid, targets in self.unobserved
      ]

  @pytest.hookimpl(optionalhook=True)
  def pytest_testnodedown(self, node, error) -> None:
    """An xdist worker is done: its tests join the controller's list."""
    sent = getattr(node, "workeroutput", {}).get(OUTPUT, [])
    self.unobserved += [(nodeid, list(targets)) for nodeid, targets in sent]

  def _across_ranks(self, session: pytest.Session) -> None:
    """This rank's record is final; on rank 0, once every rank's is (or
    hung, or the wait ran out), the ranks compared: a run whose ranks
    differ, hung, or did not all finish fails."""
    ranks = self.ranks
    assert ranks is not None
    recorder = rank_calls.recorder_for(ranks.folder)
    recorder.finish()
    if ranks.rank != 0:
      return
    deadline = time.monotonic() + self.ranks_timeout_s
    while True:
      self.late = [r for r in range(ranks.size) if not _done(ranks, r)]
      if not self.late or time.monotonic() >= deadline:
        break
      time.sleep(0.2)
    self.merged = rank_calls.merge_sanitized_ranks(ranks.folder)
    if (self.merged.status or self.late) and session.exitstatus == 0:
      session.exitstatus = pytest.ExitCode.TESTS_FAILED

  def pytest_terminal_summary(self, terminalreporter) -> None:
    if self.ranks is not None:
      terminalreporter.write_sep(
        "=", f"entangle-jax sanitizer across {self.ranks.size} ranks"
      )
      if self.merged is None:
        terminalreporter.write_line(
          f"rank {self.ranks.rank}: its communicating calls are in "
          f"{self.ranks.dump()}; rank 0 compares them with the other ranks'."
        )
      else:
        if self.late:
          terminalreporter.write_line(
            f"rank(s) {', '.join(map(str, self.late))} did not finish "
            "within the wait; their records so far are compared"
          )
        terminalreporter.write_line(self.merged.text())
    if not self.unobserved:
      return
    terminalreporter.write_sep("=", "entangle-jax sanitizer: not observed")
    for nodeid, targets in self.unobserved:
      terminalreporter.write_line(
        f"{nodeid}: called targets the sanitizer did not observe "
        f"(registered before it started): {', '.join(targets)}"
      )


def _done(ranks: Ranks, rank: int) -> bool:
  """Whether `rank` wrote its last record of this launch: final, or hung
  (its watchdog wrote it while a call was in flight)."""
  try:
    record = rank_calls.read_record(ranks.dump(rank) / rank_calls.RECORD)
  except (OSError, ValueError):
    return False
  return record.launch == ranks.launch and (
    record.final or record.state == rank_calls.HUNG
  )
