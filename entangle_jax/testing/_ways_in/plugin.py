"""The race check on a pytest run: ``pytest --entangle-races=fail|report``.

Off unless the option is given (or the environment variable
``ENTANGLE_JAX_RACES`` is ``fail`` or ``report``); then every module XLA
compiles during the run is dumped (``--xla_dump_to``, set before any
conftest is imported) and checked with the race check
(`entangle_jax.testing._ways_in.command`):

* ``fail``: a test whose call compiled a module with races fails, with the
  report; racing modules compiled outside a test's call (collection,
  conftest, fixtures), and modules taken from a compilation cache, fail
  the run.
* ``report``: no outcome changes; the run ends with a summary (modules
  checked, modules with races, the grouped pairs).

A test marked ``@pytest.mark.entangle_races_expected`` races on purpose
(the control of an ordering test): its racing modules are reported, and
counted apart in the summary, but never fail it.

In ``fail`` mode JAX's persistent compilation cache is switched off for
the run, so every module is compiled (and seen); ``report`` leaves it as
the run sets it, so that no outcome changes. A test may switch it on: XLA then
dumps the module it loads from the cache, which is checked too; a cache
hit that left no module is reported as not checked, never as free of
races, and fails a ``fail`` run. When the backend started before the
plugin could set the dump flag (jax used by another plugin), or a
``conftest.py`` replaced ``XLA_FLAGS`` instead of adding to it, nothing can
be seen: the run says so, and a ``fail`` run fails. pytest-xdist (``-n``)
is refused: its workers would share one dump and each check the others'
modules. The dump directory the plugin made is removed at the end when
nothing raced and every compile was checked; otherwise it is kept, and the
summary names it.

pytest loads the plugin through the package's ``pytest11`` entry point
(every wheel has it, the Bazel-built one too); where the package is not
installed (Bazel's runfiles), pass ``-p entangle_jax.testing.pytest_plugin``.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
  from entangle_jax.testing._ways_in import dump_watch as _dump_watch

# pytest loads this module at every start, switched on or not: it imports
# nothing of entangle_jax (and so nothing of jax) until the check is on.
MODES = ("fail", "report")
ENV = "ENTANGLE_JAX_RACES"  # The same as `_race_check.ENV`.
EXPECTED = "entangle_races_expected"


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
  """The mode, the dump being watched, and the racing modules compiled
  outside any test's call."""

  def __init__(self, mode: str, watch: _dump_watch.DumpWatch, owned: bool):
    self.mode = mode
    self.watch = watch
    self.owned = owned  # A dump directory of its own, removed at the end.
    self.unattributed: list = []
    self.expected: list = []  # Racing modules of tests marked EXPECTED.
    self.failed: list = []  # Racing modules that failed their test.


_KEY = pytest.StashKey[_State]()


def _mode(config: pytest.Config) -> str | None:
  mode = config.known_args_namespace.entangle_races
  if mode is None:
    mode = os.environ.get(ENV) or None
    if mode == "off":
      return None
    if mode is not None and mode not in MODES:
      raise pytest.UsageError(
        f"${ENV} must be one of fail, report, off, not {mode!r}"
      )
  return mode


def _distributed(config: pytest.Config) -> bool:
  """Whether pytest-xdist runs this session's tests in workers (this is
  the controller, or one of the workers)."""
  if os.environ.get("PYTEST_XDIST_WORKER"):
    return True
  workers = getattr(config.known_args_namespace, "numprocesses", None)
  dist = getattr(config.known_args_namespace, "dist", "no")
  return bool(workers) or dist not in (None, "no")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
  mode = _mode(early_config)
  if mode is None:
    return
  if _distributed(early_config):
    raise pytest.UsageError(
      "--entangle-races does not work with pytest-xdist (-n): its workers "
      "would share one dump and check each other's modules. Run without "
      '-n, or dump (XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text") '
      "and run python -m entangle_jax.testing DIR."
    )
  # Before any conftest imports jax and compiles: XLA reads its flags
  # once, and JAX reads this variable when imported. Only `fail` switches
  # the cache off: `report` changes no outcome (a test may use the cache).
  if mode == "fail":
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
  from entangle_jax.testing._ways_in import dump_watch as _dump_watch

  owned = _dump_watch.requested_dump() is None
  watch = _dump_watch.DumpWatch(_dump_watch.request_dump())
  early_config.stash[_KEY] = _State(mode, watch, owned)


def _state(config: pytest.Config) -> _State | None:
  return config.stash.get(_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
  # Registered whether the check is on or not, for --strict-markers.
  config.addinivalue_line(
    "markers",
    f"{EXPECTED}: this test races on purpose (a control); the race check "
    "reports its racing modules but does not fail it",
  )
  state = _state(config)
  if state is None:
    return
  if state.mode == "fail":
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
  outcome = yield
  state = _state(item.config)
  if state is None:
    return
  if call.when == "setup":
    # Compiled before this test's call (collection, conftest, fixtures):
    # no test's own.
    state.unattributed += [r for r in state.watch.new_results() if r.races]
    return
  if call.when != "call":
    return
  from entangle_jax.testing._report import race_text

  racy = [r for r in state.watch.new_results() if r.races]
  if not racy:
    return
  for result in racy:
    result.test = item.nodeid  # Named wherever the module is reported.
  report = outcome.get_result()
  text = "\n".join(race_text.module_report(r) for r in racy)
  if item.get_closest_marker(EXPECTED) is not None:
    state.expected += racy
    report.sections.append(("entangle-jax races (expected)", text))
    return
  if state.mode == "fail" and report.passed:
    report.outcome = "failed"
    report.longrepr = f"the modules this test compiled race:\n{text}"
    state.failed += racy  # Shown with the failure: not again at the end.
  elif state.mode == "fail" and report.failed:
    # It failed on its own too: the race check's report goes with that
    # failure, once, saying that the check fails the test as well.
    report.sections.append(
      ("entangle-jax races (the race check fails this test too)", text)
    )
    # pytest's FAILED line shows the crash's message: say it there too.
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and isinstance(crash.message, str):
      crash.message += " (and the race check: the modules it compiled race)"
    state.failed += racy
  else:
    report.sections.append(("entangle-jax races", text))


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
  state = _state(session.config)
  if state is None:
    return
  watch = state.watch
  state.unattributed += [r for r in watch.new_results() if r.races]
  unproven = state.unattributed or watch.incomplete()
  if unproven and state.mode == "fail" and session.exitstatus == 0:
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
  state = _state(config)
  if state is None:
    return
  from entangle_jax.testing._report import race_text

  run = state.watch.run()
  write = terminalreporter.write_line
  terminalreporter.section("entangle-jax race check")
  shown = {id(r) for r in state.expected + state.failed}
  unshown = [r for r in run.results if id(r) not in shown]
  for report in race_text.module_reports(unshown):
    write(report)
  if state.failed:
    write(
      f"{len(state.failed)} racing module(s) failed the tests that "
      "compiled them (their reports are with those failures)."
    )
  if state.expected:
    write(
      f"{len(state.expected)} racing module(s) compiled by tests marked "
      f"{EXPECTED} (controls that race on purpose): reported with those "
      "tests, not failures."
    )
  fails = " The run fails." if state.mode == "fail" else ""
  if state.unattributed:
    write(
      f"{len(state.unattributed)} module(s) compiled outside any test's "
      f"call (collection, conftest, fixtures) race.{fails}"
    )
  for note in race_text.run_notes(run):
    write(note)
  if run.coverage.incomplete:
    write(f"Not every compile was checked.{fails}")
  write(race_text.summary(run))
  if not state.owned:
    return
  if run.racing or run.coverage.incomplete:
    write(f"The dump is kept at {state.watch.dump}.")
  else:
    shutil.rmtree(state.watch.dump, ignore_errors=True)
