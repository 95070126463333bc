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

A module the check cannot answer for (text it cannot parse, say) never
stops the run: every test's outcome is reported as usual, the module is
named with its reason (with the test that compiled it, and in the
summary), and a ``fail`` run fails for it.

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
be seen: the run says so, and a ``fail`` run fails.

``--entangle-format=json|github|sarif`` (the command's formats; ``text``
by default) writes the run's report in that format: into the file
``--entangle-output=PATH`` names, else into the terminal summary (GitHub
Actions reads annotations from any line of the job's output), after the
text summary line. A failing test's own report is always text.

Under pytest-xdist (``-n``) each worker dumps to a folder of its own (its
``PYTEST_XDIST_WORKER`` name below the run's dump) and checks the modules
its tests compile, so ``fail`` fails the test in its worker; each worker
hands its results to the controller (``workeroutput``) as the findings'
plain records (no HLO), and the controller writes the one report of the
run.

The plugin makes its own dump directory (when ``XLA_FLAGS`` names none) on
a tmpfs, ``/dev/shm``, when that is usable (`dump_place.dump_parent`:
Bazel's ``TEST_UNDECLARED_OUTPUTS_DIR``, or a ``TMPDIR`` the user set,
comes first), else in the temporary directory: XLA writes its files there
faster. A dump kept at the end stays where it is, as the reports name its
files, until a later run's new dump in the same folder removes the kept
dumps there beyond the newest few (`dump_place.remove_stale_dumps`).

In a dump directory the plugin made, the files of a module checked free
of races are deleted once checked: what stays is what raced or could not
be checked. The directory is removed at the end when nothing raced and
every compile was checked; otherwise it is kept, and the summary names it
and its size. However the run ends, short of the process being killed: a
run stopped by a usage error or an internal error, or one without the
terminal reporter (``-p no:terminal``), removes it too, or names it on
stderr when it keeps it. A dump ``XLA_FLAGS`` asked for is the user's:
nothing in it is deleted.

Under ``mpirun`` (or ``mpiexec``, ``srun``), ``--entangle-ranks=DIR``
checks the ranks against each other too: each rank, a pytest of its own,
dumps to ``DIR/rankR`` (DIR a folder every rank can see; the modules are
kept) and checks its own modules as usual; when its tests are done it
says so in DIR, and rank 0 waits for every rank (at most
``ENTANGLE_JAX_RANKS_TIMEOUT`` seconds, 300 by default), then runs the
cross-rank check (``python -m entangle_jax.testing --ranks``) on their
dumps and prints its report in ``--entangle-format``'s format. Each
rank records, from the session's start to its end, which of its
compiled modules it ran, in order (`executions.record_executions`, in
its dump folder), so the check compares each rank's sequence of jitted
calls, not modules paired by compile order. In
``fail`` mode rank 0's run fails where the check does not prove that the
ranks make their communicating calls in one order, or a rank did not
finish. It does not combine with pytest-xdist.

With ``--entangle-sanitize``, ``--entangle-watchdog=SECONDS`` reports a
call in flight past the limit (``--entangle-watchdog-exit`` ends the
process then), and ``--entangle-sanitize-ranks=DIR`` under ``mpirun``
compares the communicating calls each rank ran (rank 0 names the first
at which they differ): `entangle_jax.testing._sanitize.pytest_hooks`.

pytest loads the plugin through the package's ``pytest11`` entry point
(every wheel has it, the Bazel-built one too); where the package is not
installed (Bazel's runfiles), pass ``-p entangle_jax.testing.pytest_plugin``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import pickle
import shutil
import sys
from typing import TYPE_CHECKING, Any

import pytest

from entangle_jax.testing._ways_in import plugin_options
from entangle_jax.testing._ways_in.plugin_options import MODES, TEXT

if TYPE_CHECKING:
  from entangle_jax.testing._ways_in import dump_watch as _dump_watch
  from entangle_jax.testing._ways_in import launcher_ranks as _launcher_ranks

# pytest loads this module at every start, switched on or not: it imports
# nothing of entangle_jax (and so nothing of jax) until the check is on.
ENV = "ENTANGLE_JAX_RACES"  # The same as `_race_check.ENV`.
EXPECTED = "entangle_races_expected"
BASE_ENV = "ENTANGLE_JAX_RACES_XDIST_DUMP"
"""Set by an xdist controller for its workers: the run's dump, below which
each worker dumps to a folder of its own."""
OUTPUT = "entangle_races"  # The key of a worker's `workeroutput`.
RANKS_TIMEOUT_ENV = "ENTANGLE_JAX_RANKS_TIMEOUT"
RANKS_TIMEOUT_S = 300.0


def pytest_addoption(parser: pytest.Parser) -> None:
  plugin_options.add_options(parser)


class _State:
  """The mode, what switched it on, the dump being watched (none on an
  xdist controller), and the racing modules compiled outside any test's
  call."""

  def __init__(
    self,
    mode: str,
    source: str,
    watch: _dump_watch.DumpWatch | None,
    dump: pathlib.Path,
    owned: bool,
  ):
    self.mode = mode
    self.source = source  # "--entangle-races=fail" or "ENTANGLE_JAX_RACES=…"
    self.watch = watch
    self.dump = dump  # The run's dump (an xdist worker's is below it).
    self.owned = owned  # A dump directory of its own, removed at the end.
    self.unattributed: list = []
    self.expected: list = []  # Racing modules of tests marked EXPECTED.
    self.failed: list = []  # Racing modules that failed their test.
    # On an xdist controller: what the workers sent.
    self.results: list = []
    self.coverages: list = []
    self.lost: list[str] = []  # Workers that sent nothing.
    self.told = False  # Whether the summary said where the dump is kept.
    # Under --entangle-ranks: this process's rank, and on rank 0 the
    # cross-rank check's report and exit status (None: not run yet).
    self.ranks: _launcher_ranks.Ranks | None = None
    self.across: tuple[str, int] | None = None
    # Under --entangle-ranks: the execution record, open for the session.
    self.recording: contextlib.ExitStack | None = None


_KEY = pytest.StashKey[_State]()


def _mode(config: pytest.Config) -> tuple[str, str] | None:
  """The mode and what asked for it (the option or the variable)."""
  mode = config.known_args_namespace.entangle_races
  if mode is not None:
    return mode, f"--entangle-races={mode}"
  mode = os.environ.get(ENV) or None
  if mode is None or mode == "off":
    return None
  if mode not in MODES:
    raise pytest.UsageError(
      f"${ENV} must be one of fail, report, off, not {mode!r}"
    )
  return mode, f"{ENV}={mode}"


def _controller(config: pytest.Config) -> bool:
  """Whether this is the controller of a pytest-xdist run (its workers run
  the tests)."""
  if os.environ.get("PYTEST_XDIST_WORKER"):
    return False
  workers = getattr(config.known_args_namespace, "numprocesses", None)
  dist = getattr(config.known_args_namespace, "dist", "no")
  return bool(workers) or dist not in (None, "no")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
  asked = _mode(early_config)
  if asked is None:
    if early_config.known_args_namespace.entangle_ranks is not None:
      raise pytest.UsageError(
        "--entangle-ranks checks the modules the race check dumps: give "
        "--entangle-races=fail or report too"
      )
    return
  mode, source = asked
  from entangle_jax.testing._emitters import formats

  try:
    formats.check_name(
      early_config.known_args_namespace.entangle_format, "--entangle-format"
    )
  except ValueError as error:
    raise pytest.UsageError(str(error)) from None
  # Before any conftest imports jax and compiles: XLA reads its flags
  # once, and JAX reads this variable when imported. Only `fail` switches
  # the cache off: `report` changes no outcome (a test may use the cache).
  if mode == "fail":
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
  from entangle_jax.testing._ways_in import dump_watch as _dump_watch

  worker = os.environ.get("PYTEST_XDIST_WORKER")
  requested = _dump_watch.requested_dump()
  ranks = _ranks(early_config, worker)
  if ranks is not None:
    # Each rank dumps where rank 0 reads it, and keeps every module.
    dump = _dump_watch.request_dump(into=ranks.start(), large_constants=True)
    watch = _dump_watch.DumpWatch(dump, prune=False)
    state = _State(mode, source, watch, dump, owned=False)
    state.ranks = ranks
  elif _controller(early_config):
    # The workers (started later, with this environment) dump below it;
    # the controller compiles no test's module and watches nothing.
    dump = requested or _dump_watch.new_dump(tmpfs=True)
    os.environ[BASE_ENV] = str(dump)
    state = _State(mode, source, None, dump, owned=requested is None)
  elif worker:
    base = os.environ.get(BASE_ENV)
    dump = pathlib.Path(base) if base else requested or _dump_watch.new_dump()
    mine = _dump_watch.request_dump(into=dump / worker)
    watch = _dump_watch.DumpWatch(mine, prune=requested is None)
    # The controller removes or keeps the run's dump.
    state = _State(mode, source, watch, dump, owned=False)
  else:
    dump = _dump_watch.request_dump(tmpfs=True)
    owned = requested is None
    watch = _dump_watch.DumpWatch(dump, prune=owned)
    state = _State(mode, source, watch, dump, owned)
  early_config.stash[_KEY] = state
  if state.owned:
    # Runs however the run ends, even where no session or summary does.
    early_config.add_cleanup(lambda: _close_dump(state))


def _sanitize_options(config: pytest.Config) -> dict[str, Any]:
  """`pytest_hooks.register`'s watchdog and ranks arguments, from
  ``--entangle-watchdog`` (``--entangle-watchdog-exit``) and
  ``--entangle-sanitize-ranks``.

  Raises:
    pytest.UsageError: a flag's value is wrong (named), or
      ``--entangle-sanitize-ranks`` outside a launch of two ranks or more,
      or with pytest-xdist.
  """
  from entangle_jax.testing._sanitize import watchdog

  found: dict[str, Any] = {}
  limit = config.getoption("entangle_watchdog", None)
  if limit is not None:
    try:
      found["watchdog"] = seconds = float(limit)
      watchdog.check_limit(seconds)
    except (TypeError, ValueError):
      raise pytest.UsageError(
        f"--entangle-watchdog={limit}: give the seconds a call may be in "
        "flight (a positive number)"
      ) from None
  if config.getoption("entangle_watchdog_exit", False):
    if limit is None:
      raise pytest.UsageError(
        "--entangle-watchdog-exit needs --entangle-watchdog=SECONDS"
      )
    found["on_hang"] = "exit"
  folder = config.getoption("entangle_sanitize_ranks", None)
  if folder is not None:
    xdist = hasattr(config, "workerinput") or bool(
      config.getoption("numprocesses", None)
    )
    found["ranks"] = _rank_of_launch("--entangle-sanitize-ranks", folder, xdist)
    found["ranks_timeout_s"] = float(
      os.environ.get(RANKS_TIMEOUT_ENV, RANKS_TIMEOUT_S)
    )
  return found


def _ranks(config, worker: str | None) -> _launcher_ranks.Ranks | None:
  """This rank's place, under ``--entangle-ranks`` (else None).

  Raises:
    pytest.UsageError: no launcher's rank is set, or pytest-xdist runs.
  """
  folder = config.known_args_namespace.entangle_ranks
  if folder is None:
    return None
  xdist = bool(worker or _controller(config))
  return _rank_of_launch("--entangle-ranks", folder, xdist)


def _rank_of_launch(
  option: str, folder: str, xdist: bool
) -> _launcher_ranks.Ranks:
  """This pytest's rank of its launch, for `option` (``--entangle-ranks``
  or ``--entangle-sanitize-ranks``), which names `folder`.

  Raises:
    pytest.UsageError: pytest-xdist runs (`xdist`), the launcher's
      variables make no rank, or none is set.
  """
  if xdist:
    raise pytest.UsageError(
      f"{option} does not combine with pytest-xdist (-n): run one pytest a rank"
    )
  from entangle_jax.testing._ways_in import launcher_ranks

  try:
    ranks = launcher_ranks.from_environment(folder)
  except ValueError as error:
    raise pytest.UsageError(f"{option}: {error}") from None
  if ranks is None:
    raise pytest.UsageError(
      f"{option}={folder}: this pytest is no rank of a launch of two or "
      "more (mpirun -n 2 ... sets $OMPI_COMM_WORLD_RANK and "
      "$OMPI_COMM_WORLD_SIZE; MPICH $PMI_RANK and $PMI_SIZE; srun "
      "$SLURM_PROCID and $SLURM_NTASKS)"
    )
  return ranks


def _state(config: pytest.Config) -> _State | None:
  return config.stash.get(_KEY, None)


def _watchdog_reaches_the_terminal(config: pytest.Config) -> None:
  """A watchdog that ends the process at a hang (``on_hang="exit"``)
  writes its report to the real stderr: this gives it pytest's capture to
  suspend first, since ``os._exit`` leaves what the capture holds unread
  (issue 77)."""
  capture = config.pluginmanager.getplugin("capturemanager")
  if capture is None:
    return
  from entangle_jax.testing._sanitize import watchdog as _watchdog

  config.add_cleanup(
    _watchdog.release_terminal_with(
      lambda: capture.suspend_global_capture(in_=False)
    )
  )


def pytest_configure(config: pytest.Config) -> None:
  # Registered whether the check is on or not, for --strict-markers.
  config.addinivalue_line(
    "markers",
    f"{EXPECTED}: this test races on purpose (a control); the race check "
    "reports its racing modules but does not fail it",
  )
  _watchdog_reaches_the_terminal(config)
  sanitize_mode = config.getoption("entangle_sanitize", None)
  if sanitize_mode:
    from entangle_jax.testing._sanitize import pytest_hooks

    pytest_hooks.register(
      config,
      strict=sanitize_mode == "strict",
      **_sanitize_options(config),
    )
  else:
    for flag in ("watchdog", "watchdog_exit", "sanitize_ranks"):
      if config.getoption(f"entangle_{flag}", None):
        name = flag.replace("_", "-")
        raise pytest.UsageError(
          f"--entangle-{name} applies to --entangle-sanitize runs"
        )
  state = _state(config)
  if state is None:
    return
  if state.mode == "fail" and state.watch is not None:
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
  outcome = yield
  state = _state(item.config)
  if state is None or state.watch is None:
    return
  if call.when == "setup":
    # Compiled before this test's call (collection, conftest, fixtures):
    # no test's own. (An unchecked one is in the results, and the summary.)
    state.unattributed += [r for r in state.watch.new_results() if r.races]
    return
  if call.when != "call":
    return
  from entangle_jax.testing._emitters import text as _text

  results = state.watch.new_results()
  for result in results:
    if result.unchecked:
      # Named with the test; the outcome stays the test's own, and the
      # summary names the module again (a `fail` run fails for it).
      result.test = item.nodeid
      outcome.get_result().sections.append(
        (
          f"entangle-jax: a module this test compiled was not checked "
          f"({state.source})",
          _text.module_report(result),
        )
      )
  racy = [r for r in results if r.races]
  if not racy:
    return
  for result in racy:
    result.test = item.nodeid  # Named wherever the module is reported.
  report = outcome.get_result()
  text = "\n".join(_text.module_report(r) for r in racy)
  on = f"({state.source})"
  if item.get_closest_marker(EXPECTED) is not None:
    for result in racy:
      result.expected = True  # Emitters say so: no error, no alert.
    state.expected += racy
    report.sections.append((f"entangle-jax races (expected) {on}", text))
    return
  if state.mode == "fail" and report.passed:
    report.outcome = "failed"
    # pytest's one-line summary shows the first line: kept short.
    report.longrepr = (
      "the modules this test compiled race:\n"
      f"(the race check, switched on by {state.source})\n{text}"
    )
    state.failed += racy  # Shown with the failure: not again at the end.
  elif state.mode == "fail" and report.failed:
    # It failed on its own too: the race check's report goes with that
    # failure, once, saying that the check fails the test as well.
    report.sections.append(
      (f"entangle-jax races (the race check fails this test too) {on}", text)
    )
    # pytest's FAILED line shows the crash's message: say it there too.
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and isinstance(crash.message, str):
      crash.message += " (and the race check: the modules it compiled race)"
    state.failed += racy
  else:
    report.sections.append((f"entangle-jax races {on}", text))


def pytest_sessionstart(session: pytest.Session) -> None:
  state = _state(session.config)
  if state is None or state.ranks is None:
    return
  # The order this rank runs its modules in, for the check across ranks:
  # a dump says which modules a rank compiled, not in which order it ran
  # them (issue 77).
  from entangle_jax.testing._ways_in import executions

  state.recording = contextlib.ExitStack()
  state.recording.enter_context(executions.record_executions(state.dump))


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
  state = _state(session.config)
  if state is None:
    return
  if state.recording is not None:
    state.recording.close()  # Marks the record complete.
    state.recording = None
  watch = state.watch
  if watch is not None:
    state.unattributed += [r for r in watch.new_results() if r.races]
    watch.finish()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # An xdist worker: to the controller.
      workeroutput[OUTPUT] = pickle.dumps(
        {
          "results": watch.results,
          "coverage": watch.coverage(),
          "unattributed": state.unattributed,
          "expected": state.expected,
          "failed": state.failed,
        }
      )
  if state.ranks is not None:
    _across_ranks(state, session.config)
  run = _run(state)
  unproven = (
    state.unattributed or run.coverage.incomplete or state.lost or run.unchecked
  )
  if across_fails(state.across):
    unproven = True
  if unproven and state.mode == "fail" and session.exitstatus == 0:
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def across_fails(across: tuple[str, int] | None) -> bool:
  """Whether the cross-rank check's answer (its report and ``--ranks``
  status) fails the run in ``fail`` mode: 1, a problem found or a rank
  that did not finish. 2 (nothing proved, or the check could not answer,
  a crash of its own included) is said in the summary but fails no test:
  it is no finding about the program."""
  return across is not None and across[1] == 1


def _across_ranks(state: _State, config: pytest.Config) -> None:
  """Says that this rank is done; on rank 0, once every rank is, checks
  their dumps across ranks (`state.across`: the report and its status)."""
  import io

  ranks = state.ranks
  assert ranks is not None
  ranks.finished()
  if ranks.rank != 0:
    return
  timeout = float(os.environ.get(RANKS_TIMEOUT_ENV, RANKS_TIMEOUT_S))
  late = ranks.wait(timeout)
  if late:
    state.across = (
      f"rank(s) {', '.join(map(str, late))} of {ranks.size} did not finish "
      f"within {timeout:g} s (${RANKS_TIMEOUT_ENV}): the ranks are not "
      "checked against each other.",
      1,
    )
    return
  from entangle_jax.testing._ways_in import command

  out = io.StringIO()
  folders = [str(ranks.dump(r)) for r in range(ranks.size)]
  fmt = config.getoption("entangle_format", TEXT)
  argv = ["--ranks", *folders, "--format", fmt]
  if (config.rootpath / "pyproject.toml").is_file():
    # The run's project declares its targets (else the command looks up
    # from the working directory, as each rank's check does).
    argv += ["--project", str(config.rootpath)]
  status = command.main(argv, out, out)
  state.across = (out.getvalue().rstrip(), status)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
  """An xdist worker is done: the controller takes its results."""
  state = _state(node.config)
  if state is None:
    return
  sent = getattr(node, "workeroutput", {}).get(OUTPUT)
  if sent is None:
    state.lost.append(node.gateway.id)
    return
  got = pickle.loads(sent)
  state.results += got["results"]
  state.coverages.append(got["coverage"])
  state.expected += got["expected"]
  state.failed += got["failed"]
  # Each worker compiles what conftests and collection compile: one
  # racing module of them per file name, as a run without -n has.
  named = {(pathlib.Path(r.path).name, r.module) for r in state.unattributed}
  for result in got["unattributed"]:
    if (pathlib.Path(result.path).name, result.module) not in named:
      state.unattributed.append(result)
    else:
      state.results.remove(result)


def _run(state: _State):
  """The run so far: the watch's, or on an xdist controller the workers'
  together."""
  from entangle_jax.testing._findings.records import Coverage, Run

  if state.watch is not None:
    return state.watch.run()
  return Run(state.results, Coverage.joined(state.coverages))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
  state = _state(config)
  if state is None or hasattr(config, "workeroutput"):
    return
  from entangle_jax.testing._emitters import formats
  from entangle_jax.testing._emitters.options import Options

  run = _run(state)
  write = terminalreporter.write_line
  terminalreporter.section(f"entangle-jax race check ({state.source})")
  shown = {id(r) for r in state.expected + state.failed}
  notes = []
  if state.failed:
    notes.append(
      f"{len(state.failed)} racing module(s) failed the tests that "
      "compiled them (their reports are with those failures)."
    )
  if state.expected:
    notes.append(
      f"{len(state.expected)} racing module(s) compiled by tests marked "
      f"{EXPECTED} (controls that race on purpose): reported with those "
      "tests, not failures."
    )
  fails = f" The run fails ({state.source})." if state.mode == "fail" else ""
  if state.unattributed:
    notes.append(
      f"{len(state.unattributed)} module(s) compiled outside any test's "
      f"call (collection, conftest, fixtures) race.{fails}"
    )
  for worker in state.lost:
    notes.append(
      f"pytest-xdist worker {worker} sent no results (it crashed or was "
      "stopped): the modules its tests compiled are not checked."
    )
  if run.unchecked:
    notes.append(
      f"{len(run.unchecked)} module(s) could not be checked (each named "
      f"above, with the reason): not proven free of races.{fails}"
    )
  if state.lost and not run.coverage.incomplete:
    # The text report says so of the coverage it holds; a lost worker's
    # is not in it.
    notes.append("Not every compile was checked.")
  if (run.coverage.incomplete or state.lost) and fails:
    notes.append(f"Some compiles were not checked.{fails}")
  options = Options(
    shown_elsewhere=frozenset(
      k for k, r in enumerate(run.results) if id(r) in shown
    ),
    notes=tuple(notes),
  )
  for line in formats.render(TEXT, run, options).splitlines():
    write(line)
  chosen = config.getoption("entangle_format", TEXT)
  if chosen != TEXT:
    report = formats.render(chosen, run, options)
    output = config.getoption("entangle_output", None)
    if output:
      pathlib.Path(output).write_text(report + "\n")
      write(f"The {chosen} report is written to {output}.")
    else:
      for line in report.splitlines():
        write(line)
  if state.owned and _keep(state):
    write(_kept(state))
    state.told = True
  if state.ranks is not None:
    _ranks_summary(terminalreporter, state)


def _ranks_summary(terminalreporter, state: _State) -> None:
  """The cross-rank check's section: on rank 0 its report, on the others
  where their modules went."""
  ranks = state.ranks
  assert ranks is not None
  terminalreporter.section(
    f"entangle-jax across {ranks.size} ranks (--entangle-ranks)"
  )
  if state.across is None:
    terminalreporter.write_line(
      f"rank {ranks.rank}: its modules are in {ranks.dump()}; rank 0 checks "
      "them against the other ranks'."
    )
    return
  report, status = state.across
  for line in report.splitlines():
    terminalreporter.write_line(line)
  if status == 1 and state.mode == "fail":
    terminalreporter.write_line(
      f"The ranks are not proved to agree: the run fails ({state.source})."
    )
  elif status == 2:
    terminalreporter.write_line(
      "The cross-rank check could not answer (above): nothing is proved "
      "across ranks, and the run does not fail on it."
    )


def _keep(state: _State) -> bool:
  """Whether the run's dump has something to show: a racing module, a
  module that could not be checked, or a compile that was not checked."""
  run = _run(state)
  return bool(
    run.racing or run.unchecked or run.coverage.incomplete or state.lost
  )


def _kept(state: _State) -> str:
  from entangle_jax.testing._ways_in import dump_watch as _dump_watch

  files, size = _dump_watch.size(state.dump)
  return (
    f"The dump is kept at {state.dump} ({files} file(s), "
    f"{_megabytes(size)}): only the files of modules that raced or could "
    "not be checked."
  )


def _close_dump(state: _State) -> None:
  """The end of a run's own dump: removed when it has nothing to show,
  else kept, and named on stderr if the summary did not name it."""
  if not state.dump.is_dir():
    return
  if not _keep(state):
    shutil.rmtree(state.dump, ignore_errors=True)
  elif not state.told:
    print(f"entangle-jax race check: {_kept(state)}", file=sys.stderr)


def _megabytes(size: int) -> str:
  return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"
