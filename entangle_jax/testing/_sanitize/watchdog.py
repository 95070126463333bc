"""The sanitizer's watchdog: a hang becomes a report of each thread's call
in flight, instead of silence.

While a ``sanitize(watchdog=seconds)`` block runs, each recording
trampoline publishes the call its thread is in (native/sanitize's
``CallsInFlight``: a per-thread slot of atomics, read without a lock). A
daemon thread reads them a few times a limit; when a call has been in
flight longer than the limit, it writes a report (`format_hang`): each
thread's call in flight, its target, its place (the user's file:line, as
the sanitizer's reports name it), how long it has been in flight, and the
rank of a multi-process launch. A call is reported once; a later call that
outlasts the limit is reported again. With ``on_hang="exit"`` the process
then ends with `HANG_EXIT_STATUS` (a blocked native call cannot be
interrupted, and ending the process is what turns a hang into a failure
under ``mpirun``); by default it goes on, and the call may still return.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Callable
from typing import IO, Protocol

from entangle_jax._src import access_policy
from entangle_jax._src.targets import sources
from entangle_jax._src.targets.communication import Communication
from entangle_jax.testing._sanitize import launch, sites, wrapping

HANG_EXIT_STATUS = 124
"""The exit status of a process that ``on_hang="exit"`` ends (as
``timeout(1)``'s for a command that ran out of time)."""

ON_HANG = ("report", "exit")
"""What the watchdog may do once it reported a hang."""


@dataclasses.dataclass(frozen=True)
class CallInFlight:
  """A call a thread was in when the watchdog looked.

  Attributes:
    thread: the OS thread id (as `SanitizedCall.thread`).
    target: the FFI target ("" where the trampoline's target is unknown).
    site: its place in its program; None where not known.
    start_ns: when it began (the records' clock).
    seconds: how long it had been in flight.
    device: XLA's device ordinal (-1: not known).
    communicates: how it talks to other ranks, by its declaration; None:
      it does not.
  """

  thread: int
  target: str
  site: sites.CallSite | None
  start_ns: int
  seconds: float
  device: int
  communicates: Communication | None

  @property
  def source(self) -> str:
    """The user's file:line of the call ("" where not known)."""
    return self.site.source if self.site is not None else ""

  @property
  def place(self) -> str:
    """Its place in its program, in words."""
    if self.site is None:
      return "place unknown (compiled before the sanitizer started)"
    return str(self.site)

  def line(self) -> str:
    """The report's line for it."""
    where = f" at {self.source}" if self.source else ""
    device = f", device {self.device}" if self.device >= 0 else ""
    talks = f", communicates ({self.communicates})" if self.communicates else ""
    return (
      f"  thread {self.thread}: {self.target}{where} ({self.place}{device})"
      f", in flight {self.seconds:.1f} s{talks}"
    )


def calls_in_flight() -> list[CallInFlight]:
  """The recorded calls in flight now, one a thread at most, oldest first
  (empty outside a ``sanitize`` block: only recording publishes them)."""
  native = wrapping.native()
  found = native.in_flight()
  now = native.now_ns()
  declarations = sources.current()
  out = []
  for thread, start_ns, number, wrapped, device in found:
    target = wrapping.target_of(wrapped)
    name = target.name if target is not None else ""
    out.append(
      CallInFlight(
        thread=thread,
        target=name,
        site=sites.site(number) if number >= 0 else None,
        start_ns=start_ns,
        seconds=max(0, now - start_ns) / 1e9,
        device=device,
        communicates=access_policy.communication(declarations, name)
        if name
        else None,
      )
    )
  return sorted(out, key=lambda c: c.start_ns)


class HangRecorder(Protocol):
  """Where a rank's record goes (`rank_calls.RankRecorder`)."""

  rank_size: tuple[int, int]

  def hung(self, in_flight: list[CallInFlight], report: str) -> None: ...


def this_rank() -> tuple[int, int] | None:
  """(rank, size) of this process by the launcher's variables (Open MPI,
  PMI, Slurm); None outside a launch, or where they do not make sense."""
  try:
    return launch.rank_and_size(os.environ)
  except ValueError:
    return None


def format_hang(
  calls: list[CallInFlight], limit_s: float, rank: tuple[int, int] | None
) -> str:
  """The watchdog's report of `calls`, the calls in flight when one had
  run past `limit_s` seconds, on `rank` ((rank, size); None: one
  process)."""
  who = f"rank {rank[0]} of {rank[1]}, " if rank is not None else ""
  lines = [
    f"entangle_jax sanitizer watchdog ({who}pid {os.getpid()}): a call has "
    f"been in flight for more than {limit_s:g} s; the calls in flight now:",
    *(c.line() for c in calls),
  ]
  return "\n".join(lines)


class Watchdog:
  """A daemon thread that reports calls in flight past a limit.

  Args:
    limit_s: seconds a call may be in flight before it is reported.
    recorder: this rank's record (``sanitize(ranks=...)``), which each
      report is written to as well; None: no folder.
    on_hang: ``"report"`` (go on) or ``"exit"`` (end the process with
      `HANG_EXIT_STATUS` once reported).
    stream: where reports go (stderr by default).
  """

  def __init__(
    self,
    limit_s: float,
    *,
    recorder: HangRecorder | None = None,
    on_hang: str = "report",
    stream: IO[str] | None = None,
  ):
    check_limit(limit_s)
    check_on_hang(on_hang)
    self.limit_s = float(limit_s)
    self.recorder = recorder
    self.on_hang = on_hang
    self.stream = stream
    self.reports: list[str] = []
    """Every report written, in order."""
    self._reported: set[tuple[int, int]] = set()
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    # A few looks a limit, at most one a second and at least one every
    # 50 ms: a hang is reported within a quarter limit of it.
    self._poll_s = min(1.0, max(0.05, self.limit_s / 4))

  def start(self) -> None:
    """Starts watching."""
    self._thread = threading.Thread(
      target=self._run, name="entangle_jax sanitizer watchdog", daemon=True
    )
    self._thread.start()

  def stop(self) -> None:
    """Stops watching (a report under way ends first)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
      self._thread = None

  def _run(self) -> None:
    while not self._stop.wait(self._poll_s):
      self.check()

  def check(self) -> str | None:
    """Looks once: the report written, or None where no call has been in
    flight past the limit since it was last reported."""
    calls = calls_in_flight()
    late = [
      c
      for c in calls
      if c.seconds > self.limit_s
      and (c.thread, c.start_ns) not in self._reported
    ]
    if not late:
      return None
    self._reported.update((c.thread, c.start_ns) for c in late)
    rank = self.recorder.rank_size if self.recorder is not None else this_rank()
    text = format_hang(calls, self.limit_s, rank)
    stream = self.stream if self.stream is not None else sys.stderr
    print(text, file=stream, flush=True)
    self.reports.append(text)
    if self.recorder is not None:
      try:
        self.recorder.hung(calls, text)
      except Exception as error:  # The report on stream stands anyway.
        print(
          f"entangle_jax sanitizer watchdog: could not write the rank's "
          f"record: {error!r}",
          file=stream,
          flush=True,
        )
    if self.on_hang == "exit":
      sys.stdout.flush()
      if stream is not sys.__stderr__:
        # Under pytest `stream` is its capture, which os._exit throws
        # away with the process: the report must reach the terminal.
        to_terminal(text)
      os._exit(HANG_EXIT_STATUS)
    return text


_RELEASES: list[Callable[[], None]] = []
"""What `to_terminal` calls first: each gives the process's own stderr
back (pytest's plugin registers its capture's suspension)."""


def release_terminal_with(release: Callable[[], None]) -> Callable[[], None]:
  """Registers `release`, which gives the process's own stderr (fd 2)
  back from a capture, for `to_terminal` to call before it writes; returns
  what unregisters it."""
  _RELEASES.append(release)
  return lambda: _RELEASES.remove(release) if release in _RELEASES else None


def to_terminal(text: str) -> None:
  """Writes `text` to the process's real stderr: each registered capture
  released first, then ``sys.__stderr__`` (fd 2 where that is gone). For a
  report that must be seen though the process ends at once
  (``os._exit``), which leaves a capture unread."""
  for release in list(_RELEASES):
    # Best effort: the write below is tried anyway.
    with contextlib.suppress(Exception):
      release()
  data = text if text.endswith("\n") else text + "\n"
  real = sys.__stderr__
  try:
    if real is not None:
      real.write(data)
      real.flush()
      return
  except (OSError, ValueError):  # Closed or detached: fd 2 itself.
    pass
  with contextlib.suppress(OSError):
    os.write(2, data.encode("utf-8", "replace"))


def check_limit(limit_s: object) -> None:
  """Raises for a watchdog limit that is not a positive number of
  seconds, naming it."""
  if isinstance(limit_s, bool) or not isinstance(limit_s, (int, float)):
    raise TypeError(
      f"sanitize(watchdog=...) takes seconds (a number), not {limit_s!r}"
    )
  if not limit_s > 0:
    raise ValueError(
      f"sanitize(watchdog=...) takes a positive number of seconds, not "
      f"{limit_s!r}"
    )


def check_on_hang(on_hang: object) -> None:
  """Raises for an ``on_hang`` that is not one of `ON_HANG`, naming it."""
  if on_hang not in ON_HANG:
    raise ValueError(
      f"sanitize(on_hang=...) takes one of {ON_HANG}, not {on_hang!r}"
    )
