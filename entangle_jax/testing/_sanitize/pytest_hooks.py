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
"""

from __future__ import annotations

import pytest

from entangle_jax.testing._sanitize import session

EXPECTED = "entangle_races_expected"
OUTPUT = "entangle_sanitize_unobserved"
"""The key of an xdist worker's ``workeroutput`` that carries its tests
that called unobserved targets: a list of [node id, [target, ...]]
(plain lists: execnet sends them as they are)."""
_SEEN = pytest.StashKey[session.Seen]()


def register(config: pytest.Config, strict: bool = False) -> None:
  """Starts the sanitizer and adds the per-test hooks to `config`
  (`strict`: a test that called an unobserved target fails)."""
  session.start()
  config.pluginmanager.register(SanitizePlugin(strict), "entangle-sanitize")


class SanitizePlugin:
  """The per-test hooks of ``--entangle-sanitize``."""

  def __init__(self, strict: bool = False):
    self.strict = strict
    self.unobserved: list[tuple[str, list[str]]] = []

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_call(self, item: pytest.Item):
    with session.sanitize() as seen:
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

  def pytest_terminal_summary(self, terminalreporter) -> None:
    if not self.unobserved:
      return
    terminalreporter.write_sep("=", "entangle-jax sanitizer: not observed")
    for nodeid, targets in self.unobserved:
      terminalreporter.write_line(
        f"{nodeid}: called targets the sanitizer did not observe "
        f"(registered before it started): {', '.join(targets)}"
      )
