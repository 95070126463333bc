"""`sanitize`: run code with every wrapped native call recorded, and
`Seen`, what the run showed."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import os
import re
import sys
import threading
from collections.abc import Generator, Sequence
from typing import IO, TYPE_CHECKING, Any

from entangle_jax._src import access_policy, reason_words
from entangle_jax._src.conflict_rule import Reason
from entangle_jax._src.targets import sources
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._sanitize import (
  callbacks,
  checks,
  host_placement,
  rank_calls,
  seen_formats,
  sites,
  user_modules,
  wrapping,
)
from entangle_jax.testing._sanitize import calls as calls_module
from entangle_jax.testing._sanitize import watchdog as _watchdog
from entangle_jax.testing._sanitize.calls import SanitizedCall
from entangle_jax.testing._sanitize.checks import (
  Contradiction,
  SanitizerRace,
  Unpaired,
)

if TYPE_CHECKING:  # numpy loads at a block's exit, not with the package.
  from entangle_jax.testing._sanitize.columns import CallColumns, NativeColumns

_SITE = re.compile(sites.SITE_ATTRIBUTE + r"\s*=\s*(\d+)")

_AGREEMENT = (Reason.DIFFERENT_NAMES, Reason.DISTINCT_ELEMENTS)
"""The reasons that clear two calls for which the agreement line says why
the static check takes them for different objects, in the order it looks
for them (their words: `reason_words.BY_REASON`)."""
_lock = threading.Lock()
_active = False
_undo_compile: Any = None


def start() -> None:
  """Wraps every FFI target registered from now on (recording stays off
  until `sanitize`). The pytest plugin calls it once, before tests import
  their libraries; `sanitize` calls it too. Compiles are left as they are:
  only a `sanitize` block edits the modules it compiles."""
  with _lock:
    wrapping.install()


def stop() -> None:
  """Registrations and compiles go to XLA unchanged again (trampolines
  registered so far stay, forwarding)."""
  with _lock:
    wrapping.uninstall()
    _uninstall_compile_hook()


def _install_compile_hook() -> None:
  """From now on each module compiled gets its calls' places and, where
  it needs one, an execution counter (`sites`)."""
  global _undo_compile
  if _undo_compile is None:
    _undo_compile = sites.install()


def _uninstall_compile_hook() -> None:
  global _undo_compile
  if _undo_compile is not None:
    _undo_compile()
    _undo_compile = None


@dataclasses.dataclass
class Seen:
  """What a sanitized run showed, filled in when `sanitize` exits.

  Attributes:
    calls: every recorded call, in order of start (a sequence whose
      calls are made on first use: a million calls cost nothing until
      read).
    races: the calls on one object, one a write, that overlapped in time
      or ran out of their program's order (`SanitizerRace`).
    contradictions: calls declared distinct that named one object
      (`Contradiction`).
    not_observed: targets that modules compiled in the run call but that
      run unwrapped: registered before the sanitizer started (start it
      before importing the library), or through the untyped API. Only
      targets the run's modules call are listed.
    unknown_places: how many calls have no known place in their program
      (their module was compiled before the run, or taken from a cache):
      none of those can be found out of order.
    dropped: calls a full per-thread log could not hold.
    unpaired: pairs of places whose calls touched one object but could
      not be compared for order (`checks.Unpaired`: which calls ran in one
      iteration is not recorded).
    unknown_runs: host callbacks in a loop or a branch whose execution
      could not be known (their module ran more than once and the
      records do not separate its executions, or the sanitizer could not
      add its execution counter to it): not compared for order.
    unknown_runs_why: those calls counted by why, in the report's words
      (`host_placement.unplaced_reason`).
    anything: calls taken as touching any object, by why (an undeclared
      target, more values than a record holds, ...), counted.
    hangs: the watchdog's reports (``sanitize(watchdog=...)``), each
      written when a call had been in flight past its limit.
  """

  calls: Sequence[SanitizedCall] = dataclasses.field(default_factory=list)
  races: list[SanitizerRace] = dataclasses.field(default_factory=list)
  contradictions: list[Contradiction] = dataclasses.field(default_factory=list)
  not_observed: list[str] = dataclasses.field(default_factory=list)
  unknown_places: int = 0
  dropped: int = 0
  unpaired: list[Unpaired] = dataclasses.field(default_factory=list)
  unknown_runs: int = 0
  unknown_runs_why: dict[str, int] = dataclasses.field(default_factory=dict)
  anything: dict[str, int] = dataclasses.field(default_factory=dict)
  declarations: Declarations | None = None
  hangs: list[str] = dataclasses.field(default_factory=list)
  _static: Any = dataclasses.field(default=None, repr=False)

  def static_finding(self, race: SanitizerRace) -> str | None:
    """What the static check says of `race`'s two calls, when both have a
    place in one module; for two calls of different executions, that it
    has no word on them (`ACROSS_EXECUTIONS`)."""
    if self._static is None:
      return None
    if _of_two_executions(race):
      return ACROSS_EXECUTIONS
    return self._static.finding(race.first, race.second)

  def static_fix(self, race: SanitizerRace) -> str | None:
    """The static check's fix for `race`'s pair, in its words (its cause's
    code and fix), when it reports the pair."""
    cause = self.static_cause(race)
    return (
      None
      if cause is None
      else f"{cause.code} {cause.headline}. Fix: {cause.fix}"
    )

  def static_cause(self, race: SanitizerRace) -> Any:
    """The cause (`Cause`: code, headline, fix steps) that the static
    report gives for `race`'s pair, when ``races()`` of the user's module
    reports the pair; else None."""
    if self._static is None or _of_two_executions(race):
      return None
    return self._static.cause(race.first, race.second)

  def report(self, file: IO[str] | None = None, format: str = "text") -> str:
    """Prints each race and contradiction (both targets, the object,
    threads, times and places, and the static check's finding and fix
    for the pair), and what was not observed; returns what it printed.
    `format`: ``"text"``, ``"json"`` or ``"sarif"`` (SARIF 2.1.0), the
    same findings in each (`seen_formats`); another is a ValueError."""
    seen_formats.check_format(format)
    text = seen_formats.render(self, format, format_parts(self))
    print(text, file=file if file is not None else sys.stdout)
    return text


@contextlib.contextmanager
def sanitize(
  *,
  clear_caches: bool = True,
  watchdog: float | None = None,
  on_hang: str = "report",
  ranks: str | os.PathLike | None = None,
) -> Generator[Seen]:
  """Records every call of a wrapped FFI target while the block runs.

  Targets registered (``jax.ffi.register_ffi_target``) after the sanitizer
  started are wrapped, and the host callbacks (``io_callback``,
  ``pure_callback``, ``jax.debug.callback``) of every module compiled
  inside the block are recorded; import a library inside the block, or
  after `start`, for its calls to be seen. JAX's in-memory compile caches
  are cleared on entry (`clear_caches`), so that every module the block
  runs is compiled with its calls' places. Only the block's compiles are
  edited (a copy of the module each: the caller's stays as it was); where
  the block compiled any, the caches are cleared again on exit, so that
  no module compiled with the sanitizer's places and execution counter
  runs, or is checked by ``races``, after it.

  Args:
    clear_caches: clear JAX's in-memory compile caches on entry.
    watchdog: seconds a recorded call may be in flight before a report
      of every thread's call in flight is written to stderr (and to the
      rank's folder under `ranks`): `watchdog.Watchdog`. None: no
      watchdog.
    on_hang: what the watchdog does once it reported: ``"report"`` (the
      process goes on) or ``"exit"`` (it ends with
      `watchdog.HANG_EXIT_STATUS`).
    ranks: a folder every rank of a multi-process launch sees: this
      rank's communicating calls are written to ``ranks/rankR``
      (`rank_calls`) when the block ends, or when the watchdog reports a
      hang; ``merge_sanitized_ranks(ranks)`` compares the ranks.

  Yields:
    A `Seen`, filled in on exit (after pending effects have run).

  Raises:
    RuntimeError: a sanitizer is active already (they do not nest).
    TypeError, ValueError: `watchdog` is not a positive number of
      seconds, `on_hang` is not one of the two, or `ranks` is no path
      (named).
  """
  global _active
  import jax

  if watchdog is not None:
    _watchdog.check_limit(watchdog)
  _watchdog.check_on_hang(on_hang)
  if ranks is not None and not isinstance(ranks, (str, os.PathLike)):
    raise TypeError(f"sanitize(ranks=...) takes a folder's path, not {ranks!r}")
  with _lock:
    if _active:
      raise RuntimeError("entangle_jax.testing.sanitize: already active")
    _active = True
  try:
    start()
    native = wrapping.native()
    jax.effects_barrier()
    native.drain()  # Calls of earlier runs.
    callbacks.drain()
    if clear_caches:
      jax.clear_caches()
    first_module = sites.next_serial()
    seen = Seen()
    with _lock:
      _install_compile_hook()
    recorder = None if ranks is None else rank_calls.recorder_for(ranks)
    if recorder is not None:
      recorder.block_started()
    watching = None
    if watchdog is not None:
      watching = _watchdog.Watchdog(
        watchdog, recorder=recorder, on_hang=on_hang
      )
    native.set_recording(True)
    callbacks.set_recording(True)
    if watching is not None:
      watching.start()
    try:
      yield seen
    finally:
      try:
        jax.effects_barrier()
      finally:
        if watching is not None:
          watching.stop()
          seen.hangs = list(watching.reports)
        native.set_recording(False)
        callbacks.set_recording(False)
        with _lock:
          _uninstall_compile_hook()
        if sites.next_serial() != first_module:
          # The block's modules carry the places and the counter: none of
          # them may run, or be checked by races(), after the block, so
          # JAX compiles them anew, as the user's program made them.
          jax.clear_caches()
      records, more_operands, more_values, dropped = native.drain()
      from entangle_jax.testing._sanitize.columns import (
        CallColumns,
        HostRecords,
        NativeColumns,
      )

      # Millions of small objects, none in a cycle: the collector would
      # walk them again and again while they are made.
      collecting = gc.isenabled()
      gc.disable()
      try:
        recorded = NativeColumns(
          records, native.record_layout, more_operands, more_values
        )
        del records, more_operands, more_values
        host = HostRecords(callbacks.drain())
        if (host.run_id == callbacks.UNKNOWN_RUN).any() or any(
          s.host_callback == sites.ANCHOR for s in host.sites
        ):
          # Calls of a loop or a branch to place, or a counter's to drop.
          with_native = {
            s.module.serial for s in recorded.sites if s is not None
          }
          placed = host_placement.place_host_calls(
            host.every(),
            _native_runs(recorded),
            with_native,
            seen.unknown_runs_why,
          )
          host = HostRecords.of_calls(placed)
        _fill(seen, CallColumns(recorded, host), dropped, first_module)
        if recorder is not None:
          recorder.block_ended(recorded)
      finally:
        if collecting:
          gc.enable()
  finally:
    with _lock:
      _active = False


def _native_runs(native: NativeColumns) -> dict[int, set[int]]:
  """The run ids of each module's native calls outside every loop and
  branch (`host_placement.place_host_calls`)."""
  import numpy as np

  from entangle_jax.testing._sanitize import candidates

  pairs, _ = candidates.groups(native.site, native.columns["run_id"])
  _, first = np.unique(pairs, return_index=True)
  out: dict[int, set[int]] = collections.defaultdict(set)
  run_ids = native.columns["run_id"][first].tolist()
  for index, run_id in zip(native.site[first].tolist(), run_ids, strict=True):
    site = native.sites[index]
    if site is not None and not site.context:
      out[site.module.serial].add(run_id)
  return out


def _fill(seen: Seen, columns: CallColumns, dropped: int, first: int) -> None:
  """Fills `seen` from the run's calls: the checks see only the calls
  that can be in a finding (`candidates`), and the counts come from the
  columns."""
  import numpy as np

  from entangle_jax.testing._sanitize import candidates
  from entangle_jax.testing._sanitize.columns import LazyCalls

  declarations = sources.current()
  seen.declarations = declarations
  seen.calls = LazyCalls(columns)
  seen.dropped = dropped
  nowhere = [k for k, site in enumerate(columns.sites) if site is None]
  seen.unknown_places = int(np.isin(columns.site, nowhere).sum())
  reasons = {n.name: n.reason for n in wrapping.not_wrapped()}
  seen.not_observed = sorted(
    f"{t} ({reasons[t]})" if t in reasons else t
    for t in {t for m in sites.modules_since(first) for t in m.not_observed}
  )
  seen.unknown_runs = int((columns.host.run_id == callbacks.UNKNOWN_RUN).sum())
  # What each key touches, asked of one call of it (`touches` as it is).
  representatives = columns.at(np.array(columns.representatives, np.int64))
  touch = [calls_module.touches(c, declarations) for c in representatives]
  anything: dict[str, int] = {}
  for t, n in zip(touch, _counts(columns.key), strict=False):
    for obj in t.objects:
      if obj.anything and obj.why:
        anything[obj.why] = anything.get(obj.why, 0) + n
  seen.anything = anything
  key_touches = np.array([bool(t.objects) for t in touch], dtype=bool)
  key_repeats = np.array(
    [
      bool(checks.repeated_handles(c, t, declarations))
      for c, t in zip(representatives, touch, strict=True)
    ],
    dtype=bool,
  )
  empty = np.zeros(0, dtype=bool)
  position, context = _places(columns.sites)
  picked, order = candidates.needed(
    columns.start_ns,
    columns.end_ns,
    columns.serials(),
    columns.site,
    columns.run_id,
    key_touches[columns.key] if len(touch) else empty,
    key_repeats[columns.key] if len(touch) else empty,
    columns.key,
    position[columns.site] if len(position) else columns.site,
    context[columns.site] if len(context) else columns.site,
  )
  keys = columns.key[picked].tolist()
  made = columns.at(picked)
  found = dict(zip(made, (touch[k] for k in keys), strict=True))
  runs = checks.executions(found)
  # The order check sees the executions whose calls it needs whole; the
  # others ran plainly in program order (`candidates.plainly_in_order`).
  checked = {c for c, o in zip(made, order.tolist(), strict=True) if o}
  ordered = {k: v for k, v in runs.items() if v[0] in checked}
  seen.races = checks.races(
    found, seen.unpaired, runs, ordered, columns.native.iteration
  )
  static = _Static(declarations, user_modules.take_user_modules(first))
  seen._static = static
  seen.contradictions = checks.contradictions(
    found, declarations, static.distinct, runs
  )


def _places(places: list) -> tuple[Any, Any]:
  """Per site (`columns.CallColumns.sites`), its position in program
  order and the loops and branches it is in, as a dense index (-1 for
  no known place)."""
  import numpy as np

  contexts: dict[tuple, int] = {}
  position, context = [], []
  for site in places:
    if site is None:
      position.append(-1)
      context.append(-1)
    else:
      position.append(site.position)
      context.append(contexts.setdefault(site.context, len(contexts)))
  return np.array(position, np.int64), np.array(context, np.int64)


def _counts(index) -> list[int]:
  """How many times each value of a dense index (a numpy array) occurs."""
  import numpy as np

  return np.bincount(index).tolist() if len(index) else []


class _Static:
  """The static check on the modules the calls ran in, built on demand."""

  def __init__(
    self,
    declarations: Declarations,
    kept: dict[int, user_modules.UserModule] | None = None,
  ):
    self.declarations = declarations
    self.analyses: dict[int, Any] = {}
    self.user_modules = kept or {}
    self.user: dict[int, Any] = {}
    """By serial: the user's module's `OrderAnalysis` and its races, or
    None (`_user_analysis`)."""

  def _ops(self, a: SanitizedCall, b: SanitizedCall):
    if a.site is None or b.site is None or a.site.module is not b.site.module:
      return None
    module = a.site.module
    if module.serial not in self.analyses:
      self.analyses[module.serial] = self._analyse(module)
    built = self.analyses[module.serial]
    if built is None:
      return None
    analysis, ops, _ = built
    x, y = ops.get(a.site.number), ops.get(b.site.number)
    if x is None or y is None:
      return None
    return analysis, x, y

  def _analyse(self, module: sites.SanitizedModule):
    from entangle_jax.testing._analysis.order_analysis import OrderAnalysis

    text = module.text()
    if text is None:
      return None
    try:
      # With the program beside it, the check also sees what XLA hid (a
      # call moved out of its loop, calls merged): `checks.MERGED`.
      analysis = OrderAnalysis(
        text,
        declarations=self.declarations,
        before_optimization=module.program_text(),
      )
    except ValueError:
      return None
    return analysis, _ops_by_site(analysis, text), None

  def _verdicts(self, a: SanitizedCall, b: SanitizedCall):
    """The static check's verdicts on the two calls' ops
    (`conflict_rule.Verdict`), as on two devices where the two ran on two
    devices of one SPMD module; None where it cannot tell."""
    found = self._ops(a, b)
    if found is None:
      return None
    analysis, x, y = found
    across = (
      analysis.module.devices > 1
      and min(a.device, b.device) >= 0
      and a.device != b.device
    )
    return analysis.verdicts(x, y, across_devices=across)

  def distinct(self, a: SanitizedCall, b: SanitizedCall) -> str | None:
    """Why the static check, reading the module the two calls ran in (on
    the devices they ran on), takes them for different objects, in words;
    None when it does not (or cannot tell): different elements of one
    array declared distinct, or different ``Resource`` names (a named
    ``Resource``'s, or the arguments of ``in_program_order(f,
    distinct_arguments=True)``)."""
    verdicts = self._verdicts(a, b)
    if verdicts is None or any(v.conflict for v in verdicts):
      return None
    for reason in _AGREEMENT:
      for v in verdicts:
        if v.reason is reason:
          words = reason_words.BY_REASON[reason]
          return words.headline_with(**reason_words.two_names(v.evidence.names))
    return None

  def _user_analysis(self, serial: int):
    """The static check of module `serial` as the user's program made it
    (`sites.UserModule`: compiled outside the sanitizer's edits, read with
    its text before optimization, as ``races()`` of its ``Lowered``
    reads it), and its races; None where that module is not at hand or
    cannot be compiled or read."""
    if serial in self.user:
      return self.user[serial]
    found = None
    module = self.user_modules.get(serial)
    if module is not None:
      from entangle_jax.testing._analysis.order_analysis import OrderAnalysis

      try:
        text, before = module.texts()
        # The declarations in effect: what races() of it would read.
        analysis = OrderAnalysis(
          text,
          declarations=self.declarations,
          before_optimization=before,
          who="races",
        )
        found = (analysis, list(analysis.races()))
      except Exception:
        found = None
    self.user[serial] = found
    return found

  def _race(self, a: SanitizedCall, b: SanitizedCall):
    """The race ``races()`` of the user's own module reports for the two
    calls (its two ops carry the calls' Python stacks; across devices the
    same op twice), or None; `_NOT_AT_HAND` where that module's answer is
    not at hand."""
    if a.site is None or b.site is None or a.site.module is not b.site.module:
      return _NOT_AT_HAND
    found = self._user_analysis(a.site.module.serial)
    if found is None or not a.site.stack or not b.site.stack:
      return _NOT_AT_HAND
    _, races = found
    x, y = a.site.stack, b.site.stack
    for race in races:
      p, q = race.first.instruction.stack, race.second.instruction.stack
      if {race.first.target, race.second.target} != {a.target, b.target}:
        continue
      if (_same_stack(x, p) and _same_stack(y, q)) or (
        _same_stack(x, q) and _same_stack(y, p)
      ):
        return race
    return None

  def _user_verdicts(self, a: SanitizedCall, b: SanitizedCall):
    """The user's module's verdicts on the two calls' ops, where each call
    names one op there (by its stack and target); else None."""
    assert a.site is not None and b.site is not None
    found = self._user_analysis(a.site.module.serial)
    if found is None:
      return None
    analysis, _ = found
    ops = []
    for call in (a, b):
      assert call.site is not None
      named = [
        op
        for op in analysis.user_native_calls()
        if op.target == call.target
        and _same_stack(op.instruction.stack, call.site.stack)
      ]
      if len(named) != 1:
        return None
      ops.append(named[0])
    across = (
      analysis.module.devices > 1
      and min(a.device, b.device) >= 0
      and a.device != b.device
    )
    return analysis.verdicts(ops[0], ops[1], across_devices=across)

  def finding(self, a: SanitizedCall, b: SanitizedCall) -> str | None:
    """What ``races()`` of the user's own module says of the two calls, in
    words; None where that module's answer is not at hand (never the
    answer of the sanitizer's edited copy)."""
    race = self._race(a, b)
    if race is _NOT_AT_HAND:
      return None
    if race is not None:
      return "the static check reports them as may race, and they did"
    verdicts = self._user_verdicts(a, b)
    if verdicts is None:
      # A call with no op of its own there (XLA merged identical calls, or
      # a shared function's op stands for several): no claim either way.
      return (
        "the static check reports no pair at these two calls (one of them "
        "has no op of its own in the module as compiled: XLA merged or "
        "removed it)"
      )
    if not any(v.conflict for v in verdicts):
      return (
        "the static check finds no conflict between them (the declarations "
        "say they touch different objects or never conflict)"
      )
    return "the static check finds them ordered, yet they raced"

  def cause(self, a: SanitizedCall, b: SanitizedCall):
    """The cause (code, headline, fix) that the static report gives for
    the pair ``races()`` of the user's module reports for the two calls;
    None where it reports none."""
    race = self._race(a, b)
    if race is None or race is _NOT_AT_HAND:
      return None
    from entangle_jax.testing._findings.from_analysis import cause_of

    return cause_of(race)


ACROSS_EXECUTIONS = (
  "the static check reads one execution at a time: it has no word on two "
  "calls of different executions, and no fix of its orders them (run the "
  "executions one after another, or give each its own object)"
)
"""The static line of a race between two executions (`_of_two_executions`):
the pair the static check would be asked about is one op's two runs, or
two ops that one execution orders (or not), which says nothing of another
execution's call landing between them; its fix, an ``entangle`` inside the
module, would leave the race as it is."""


def _of_two_executions(race: SanitizerRace) -> bool:
  """Whether `race`'s first two calls ran in two executions: always for
  ``"interleaved"``; for another kind, where both calls' executions are
  known, counted alike and differ. Native calls and the host callbacks
  routed on CPU carry XLA's run id; a callback elsewhere carries its
  recorder's count (negative, `callbacks`), which says nothing against a
  native call's id: there the answer is no (the static line stays)."""
  if race.kind == checks.INTERLEAVED:
    return True
  a, b = race.first.run_id, race.second.run_id
  unknown = (callbacks.UNKNOWN_RUN, callbacks.SEQUENCE_RUN)
  if a in unknown or b in unknown:
    return False
  native = (race.first.function is None, race.second.function is None)
  if native[0] != native[1] and not (a > 0 and b > 0):
    return False
  return (a > 0) == (b > 0) and a != b


def _same_stack(x: tuple, y: tuple) -> bool:
  """Whether two Python stacks (innermost first) are one call's: the
  shorter is the longer's innermost part (XLA's HLO appends the frames of
  the ops a call is inside, such as a ``shard_map``'s, which the
  sanitizer's walk may not)."""
  if not x or not y:
    return False
  n = min(len(x), len(y))
  return x[:n] == y[:n]


_NOT_AT_HAND = object()
"""`_Static._race`'s answer where the user's module's check is not at
hand."""


def _ops_by_site(analysis, text: str) -> dict[int, Any]:
  """The native calls' ops of `analysis` (of module `text`), by the site
  number each carries."""
  lines = text.splitlines()
  ops = {}
  for op in analysis.user_native_calls():
    line = op.instruction.line
    if 0 < line <= len(lines):
      match = _SITE.search(lines[line - 1])
      if match:
        ops[int(match.group(1))] = op
  return ops


def _time(call: SanitizedCall, origin: int) -> str:
  start = (call.start_ns - origin) / 1e3
  end = (call.end_ns - origin) / 1e3
  return f"{start:.1f}-{end:.1f} us"


def _call_line(call: SanitizedCall, origin: int) -> str:
  where = ""
  if call.site is not None and call.site.source:
    where = f" at {call.site.source}"
  device = f" device {call.device}" if call.device >= 0 else ""
  return (
    f"    {call.label}{where} on {call.platform}{device}, thread "
    f"{call.thread}, {_time(call, origin)}, {call.place}"
  )


def _headline(seen: Seen) -> str:
  line = (
    f"entangle_jax sanitizer: {len(seen.calls)} calls, {len(seen.races)} "
    f"races, {len(seen.contradictions)} contradictions"
  )
  if seen.not_observed:
    line += (
      f"; {len(seen.not_observed)} called targets NOT OBSERVED (their "
      "races cannot be seen)"
    )
  # Each call once, however many unpaired pairs its place is in.
  unpaired = set().union(*(u.members for u in seen.unpaired))
  unchecked = len(unpaired) + seen.unknown_runs
  if unchecked:
    line += f"; {unchecked} calls not compared for order"
  return line


def _object_words(seen: Seen, race: SanitizerRace) -> str:
  """The race's object, and how the binding names it: the argument of
  its Python function that carries it (a shipped declaration's
  ``argument``), else the operand it was read from."""
  text = str(race.object)
  if race.object.anything or seen.declarations is None:
    return text
  for call in (race.first, race.second):
    found = access_policy.footprint(call.target, seen.declarations)
    if not found.declared_object:
      continue
    if found.argument is not None:
      return f"{text} (argument {found.argument})"
    return f"{text} (operand {found.operand} of {call.target})"
  return text


def format_seen(seen: Seen) -> str:
  """`Seen.report`'s text."""
  return format_parts(seen)["text"]


def format_parts(seen: Seen) -> dict[str, Any]:
  """`Seen.report`'s text (``text``) and its parts, which the other forms
  reuse (`seen_formats`): ``headline``, per race its object's words
  (``objects``) and its lines (``races``), and the lines on what was not
  observed, compared or recorded (``notes``)."""
  # The calls are in order of start: the first began first.
  origin = seen.calls[0].start_ns if len(seen.calls) else 0
  lines = [_headline(seen)]
  notes = []
  if seen.not_observed:
    notes.append(
      "not observed (registered before the sanitizer started: start it "
      "before importing the library; or not wrappable): "
      + ", ".join(seen.not_observed)
    )
    lines.append(f"  {notes[-1]}")
  objects, races = [], []
  for race in seen.races:
    start = len(lines)
    objects.append(_object_words(seen, race))
    lines.append(f"  race ({race.kind}) on {objects[-1]}:")
    lines.append(_call_line(race.first, origin))
    lines.append(_call_line(race.second, origin))
    if race.kind == checks.OUT_OF_ORDER:
      lines.append(
        "    the second ran first: it returned before the first began, "
        "though the program made the first first"
      )
    elif race.kind == checks.MERGED and race.runs is not None:
      lines.append(
        f"    their places each run once an iteration of a loop both are "
        f"in, but ran {race.runs[0]} and {race.runs[1]} times in this "
        "execution: XLA moved one out of the loop or merged its calls, so "
        "its calls cannot each keep the program's order with the other's"
      )
    elif race.kind == checks.INTERLEAVED and race.then is not None:
      lines.append(_call_line(race.then, origin))
      lines.append(
        "    the second, a write of another execution, ran after the first "
        "and before the third, two calls of one execution"
      )
    else:
      lines.append("    they ran at the same time; the first began first")
    finding = seen.static_finding(race)
    if finding is not None:
      lines.append(f"    {finding}")
    fix = seen.static_fix(race)
    if fix is not None:
      lines.append(f"    {fix}")
    races.append("; ".join(line.strip() for line in lines[start:]))
  for c in seen.contradictions:
    lines.append(f"  contradiction on {c.object}: {c.declaration}")
    lines.append(_call_line(c.first, origin))
    if c.second is not c.first:
      lines.append(_call_line(c.second, origin))
  told = len(lines)
  for u in seen.unpaired:
    lines.append(
      f"  not compared for order ({u.calls} calls): {u} (pairing them "
      "would be a guess)"
    )
  said = 0
  for why, n in sorted(seen.unknown_runs_why.items()):
    said += n
    lines.append(
      f"  {n} host callbacks in a loop or a branch whose execution is not "
      f"recorded: {why}; so their order was not checked"
    )
  if seen.unknown_runs > said:
    lines.append(
      f"  {seen.unknown_runs - said} host callbacks in a loop or a branch "
      "whose execution is not recorded, so their order was not checked"
    )
  for why, n in sorted(seen.anything.items()):
    lines.append(f"  {n} calls taken as touching any object: {why}")
  if seen.unknown_places:
    lines.append(
      f"  {seen.unknown_places} calls have no known place in their program "
      "(compiled before the sanitizer started, or taken from a cache): "
      "their order was not checked"
    )
  if seen.dropped:
    lines.append(f"  {seen.dropped} calls were not recorded (a log was full)")
  notes += [line.strip() for line in lines[told:]]
  for hang in seen.hangs:
    lines += [f"  {line}" for line in hang.splitlines()]
  return {
    "text": "\n".join(lines),
    "headline": lines[0],
    "objects": objects,
    "races": races,
    "notes": notes,
  }
