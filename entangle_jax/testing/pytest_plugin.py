"""The race check on a pytest run: ``pytest --entangle-races=fail|report``.

Off unless the option is given; then every module XLA compiles during the
run is dumped (``--xla_dump_to``, set before any conftest is imported) and
checked with the race check (`entangle_jax.testing._check`):

* ``fail``: a test whose call compiled a module with races fails, with the
  report; racing modules compiled outside a test's call (collection,
  conftest, fixtures), and modules taken from a compilation cache, fail
  the run.
* ``report``: no outcome changes; the run ends with a summary (modules
  checked, modules with races, the grouped pairs).

JAX's persistent compilation cache is switched off for the run, so every
module is compiled (and seen). A test may switch it on again: XLA then
dumps the module it loads from the cache, which is checked too; a cache
hit that left no module is reported as not checked, never as free of
races, and fails a ``fail`` run. When the
backend started before the plugin could set the dump flag (jax used by
another plugin), nothing can be seen, and the run says so.

pytest loads the plugin through the package's ``pytest11`` entry point; a
Bazel-built wheel has no entry points: pass ``-p
entangle_jax.testing.pytest_plugin`` there.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest

MODES = ("fail", "report")


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("entangle-jax")
  group.addoption(
    "--entangle-races",
    choices=MODES,
    default=None,
    help=(
      "check every module XLA compiles for native calls that may conflict "
      "and that nothing orders: 'fail' fails the test that compiled it, "
      "'report' only summarises at the end"
    ),
  )


class _State:
  """The dump directory, the modules seen so far, and what was found."""

  def __init__(self, mode: str):
    self.mode = mode
    self.dump = pathlib.Path(tempfile.mkdtemp(prefix="entangle-races-"))
    self.seen: set[pathlib.Path] = set()
    self.results: list = []
    self.cache_hits = 0
    self.unattributed: list = []

  def unchecked(self) -> int:
    """How many compiles JAX served from its persistent cache that left
    no module to check. XLA dumps the module it loads from the cache
    (its file names no platform), so a hit is usually checked too."""
    loaded = sum(1 for r in self.results if r.platform is None)
    return max(0, self.cache_hits - loaded)

  def new_results(self) -> list:
    """Checks the modules dumped since the last call."""
    from entangle_jax.testing import _check

    found = sorted(set(self.dump.rglob(_check.OPTIMIZED)) - self.seen)
    self.seen.update(found)
    if not found:
      return []
    results = _check.check([str(p) for p in found])
    self.results += results
    return results


_KEY = pytest.StashKey[_State]()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
  mode = early_config.known_args_namespace.entangle_races
  if mode is None:
    return
  state = _State(mode)
  early_config.stash[_KEY] = state
  # Before any conftest imports jax and compiles: XLA reads its flags once.
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = (
    f"{flags} --xla_dump_to={state.dump} --xla_dump_hlo_as_text".strip()
  )
  os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"


def _state(config: pytest.Config) -> _State | None:
  return config.stash.get(_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
  state = _state(config)
  if state is None:
    return
  import jax
  import jax.monitoring

  jax.config.update("jax_enable_compilation_cache", False)

  def count(event: str, **_: object) -> None:
    if "cache_hit" in event:
      state.cache_hits += 1

  jax.monitoring.register_event_listener(count)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
  outcome = yield
  state = _state(item.config)
  if state is None:
    return
  if call.when == "setup":
    # Compiled before this test's call (collection, conftest, fixtures):
    # no test's own.
    state.unattributed += [r for r in state.new_results() if r.races]
    return
  if call.when != "call":
    return
  from entangle_jax.testing import _check

  racy = [r for r in state.new_results() if r.races]
  if not racy:
    return
  report = outcome.get_result()
  text = "\n".join(_check.module_report(r) for r in racy)
  report.sections.append(("entangle-jax races", text))
  if state.mode == "fail" and report.passed:
    report.outcome = "failed"
    report.longrepr = f"the modules this test compiled race:\n{text}"


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
  state = _state(session.config)
  if state is None:
    return
  state.unattributed += [r for r in state.new_results() if r.races]
  unproven = state.unattributed or state.unchecked()
  if unproven and state.mode == "fail" and session.exitstatus == 0:
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
  state = _state(config)
  if state is None:
    return
  from entangle_jax.testing import _check

  write = terminalreporter.write_line
  terminalreporter.section("entangle-jax race check")
  if not state.results and not state.seen:
    write(
      "No module was seen: XLA wrote no dump. (Did the backend start "
      "before this plugin set --xla_dump_to? Then run with "
      'XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" and '
      "python -m entangle_jax.testing DIR.)"
    )
  for result in state.results:
    if result.races:
      write(_check.module_report(result))
  if state.unattributed:
    fails = ": the run fails" if state.mode == "fail" else ""
    write(
      f"{len(state.unattributed)} module(s) compiled outside any test's "
      f"call (collection, conftest, fixtures) race{fails}."
    )
  if state.cache_hits:
    write(
      f"{state.cache_hits} compile(s) came from JAX's persistent compilation "
      "cache; the modules XLA dumped as it loaded them were checked."
    )
  if state.unchecked():
    fails = "; the run fails" if state.mode == "fail" else ""
    write(
      f"{state.unchecked()} of them left no module to check: not proven "
      f"free of races{fails}."
    )
  note = _check.platform_note(state.results)
  if note:
    write(note)
  write(_check.summary(state.results))
  if state.mode == "report":
    shutil.rmtree(state.dump, ignore_errors=True)
