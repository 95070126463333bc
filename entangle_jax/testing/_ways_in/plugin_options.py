"""The pytest plugin's command-line options (`plugin.pytest_addoption`):
their names, defaults and help, in one group."""

from __future__ import annotations

import pytest

MODES = ("fail", "report")
TEXT = "text"


def add_options(parser: pytest.Parser) -> None:
  """Adds the entangle-jax group of options to pytest's `parser`."""
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
  group.addoption(
    "--entangle-format",
    default=TEXT,
    metavar="FORMAT",
    help=(
      "the format of the race check's report on the run: text (the "
      "default) or one of the other formats python -m entangle_jax.testing "
      "--format takes (json, github, sarif); a failing test's report stays "
      "text"
    ),
  )
  group.addoption(
    "--entangle-output",
    default=None,
    metavar="PATH",
    help=(
      "write the report in --entangle-format's format to PATH (the "
      "terminal summary says where) rather than into the terminal summary"
    ),
  )
  group.addoption(
    "--entangle-ranks",
    default=None,
    metavar="DIR",
    help=(
      "under mpirun (or mpiexec, srun), with --entangle-races: each rank "
      "dumps its modules to DIR/rankR (DIR a folder every rank can see), "
      "and rank 0, once every rank is done, checks them across ranks "
      "(python -m entangle_jax.testing --ranks); in 'fail' mode a run whose "
      "ranks are not proved to agree fails"
    ),
  )
  group.addoption(
    "--entangle-sanitize",
    action="store_const",
    const="on",
    dest="entangle_sanitize",
    default=None,
    help=(
      "record every native call of each test (entangle_jax.testing."
      "sanitize) and fail a test in which calls on one object raced; a "
      "test that called targets the sanitizer did not observe is listed "
      "in the summary"
    ),
  )
  group.addoption(
    "--entangle-sanitize=strict",
    action="store_const",
    const="strict",
    dest="entangle_sanitize",
    help=(
      "as --entangle-sanitize, and also fail a test that called targets "
      "the sanitizer did not observe"
    ),
  )
  group.addoption(
    "--entangle-watchdog",
    default=None,
    metavar="SECONDS",
    help=(
      "with --entangle-sanitize: a call in flight longer than SECONDS is "
      "reported on stderr (each thread's call in flight, its file:line, "
      "the rank); the test goes on"
    ),
  )
  group.addoption(
    "--entangle-watchdog-exit",
    action="store_true",
    default=False,
    help=(
      "with --entangle-watchdog: once it reported, end the process (exit "
      "status 124), so that a hang fails the run"
    ),
  )
  group.addoption(
    "--entangle-sanitize-ranks",
    default=None,
    metavar="DIR",
    help=(
      "under mpirun (or mpiexec, srun), with --entangle-sanitize: each rank "
      "records its communicating calls to DIR/rankR, and rank 0, once "
      "every rank is done, names the first call at which they differ "
      "(python -m entangle_jax.testing --sanitized-ranks DIR); a run whose "
      "ranks differ, or hung, fails"
    ),
  )
