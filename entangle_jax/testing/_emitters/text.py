"""The text emitter: races, unordered pairs and whole runs, rendered for
people from the findings (`entangle_jax.testing._report.findings`)."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._analysis.ops import Op, Race
from entangle_jax.testing._analysis.order_analysis import LeftOut
from entangle_jax.testing._report.findings import (
  ORDER_FIX,
  Coverage,
  Findings,
  ModuleResult,
  Run,
  findings_of,
)

FIX_HINT = "Usual fix: " + ORDER_FIX

SHOWN_PER_GROUP = 5
"""Pairs shown for each cause; the others are counted (all are in the
list `races` returns)."""

FIX_LINE = "  Fix: "
APPLIED_LINE = "Declarations applied: "
NO_RACES = "No races: every two calls that may conflict are ordered."


def format_races(
  races: Sequence[Race],
  heading: str | None = None,
  *,
  shown_per_group: int | None = SHOWN_PER_GROUP,
  left_out: Sequence[LeftOut] | None = None,
) -> str:
  """Renders pairs grouped by their likely cause, each group with its fix.

  Args:
    races: pairs from `races` (shown with what each call accesses, grouped
      by cause, real hazards first), or from `OrderAnalysis.unordered`
      (given a `heading`).
    heading: first line; by default it counts the races. With a heading,
      each pair reads "``first`` is not ordered before ``second``".
    shown_per_group: how many entries of each group to show (None: all);
      the rest are counted. Pairs of the same two targets on the same two
      lines of the user's code are one entry, with their count.
    left_out: the pairs declared safe pairs left out
      (`OrderAnalysis.safe_pairs_left_out`), counted by entry; by default
      those `races` came with (``races()`` answers a `Races` list that
      holds them). A report never says "No races" when there are some;
      where there are none, a `Races` list without a pair is rendered
      with the declarations applied to its calls.

  Raises:
    TypeError: an element of `races` is not a `Race` (a tuple of names
      says too little to render), or `shown_per_group` is not an int or
      None.
    ValueError: `shown_per_group` is below 1.
  """
  if shown_per_group is not None and (
    isinstance(shown_per_group, bool) or not isinstance(shown_per_group, int)
  ):
    raise TypeError(
      "format_races: shown_per_group must be an int or None, not "
      f"{type(shown_per_group).__name__}"
    )
  if shown_per_group is not None and shown_per_group < 1:
    raise ValueError(
      f"format_races: shown_per_group must be at least 1, not {shown_per_group}"
    )
  for index, race in enumerate(races):
    if not isinstance(race, Race):
      raise TypeError(
        f"format_races: races[{index}] is {type(race).__name__} {race!r}, "
        "not a Race: pass what races() or OrderAnalysis.unordered() returned"
      )
  if left_out is None:
    left_out = getattr(races, "left_out", ())
  count = len(races)
  if not count and heading is None and not left_out:
    declared = getattr(races, "declared", ())
    if declared:  # They decided the answer: say which.
      return f"{NO_RACES}\n{APPLIED_LINE}{'; '.join(declared)}."
    return NO_RACES
  if heading is not None:
    lines = [heading]
    for race in races:
      lines.append(f"  {race.first.label()}")
      lines.append(f"    is not ordered before {race.second.label()}")
    return "\n".join([*lines, FIX_HINT])
  return "\n".join(
    findings_lines(findings_of(races, left_out), shown_per_group, said=None)
  )


def findings_lines(
  findings: Findings, shown_per_group: int | None, said: set[str] | None
) -> list[str]:
  """The lines of a report of `findings` (at least one pair, reported or
  left out as safe). With a `said` set, a fix or a list of applied
  declarations already in it is written "as above" (a suite's modules
  often race for one reason), a group's note already in it is left out,
  and what is written in full is added to it."""
  causes = findings.groups
  count = findings.count
  reasons = f", for {len(causes)} reasons" if len(causes) > 1 else ""
  if not count:
    excused = findings.left_out_count
    lines = [
      f"{excused} pair{'s' * (excused != 1)} of calls may conflict and run "
      "in either order, all left out as safe by declared safe_pairs (taken "
      "at their word, not checked):",
      *(f"  {s.count} x {s}" for s in findings.left_out),
    ]
    if findings.applied:
      lines.append(_once(APPLIED_LINE, "; ".join(findings.applied) + ".", said))
    return lines
  lines = [
    f"{count} pair{'s' * (count != 1)} of calls may conflict and run in "
    f"either order{reasons}:"
  ]
  for group in causes:
    if len(causes) > 1 or group.count > 1:
      lines.append(f"{group.count} x {group.cause.headline}:")
    else:
      lines.append(f"{group.cause.headline}:")
    entries = group.entries
    shown = entries if shown_per_group is None else entries[:shown_per_group]
    for entry in shown:
      race = entry.race
      other = ", on another device," if race.across_devices else ""
      same = len(entry.races)
      times = f" ({same} pairs on these lines)" if same > 1 else ""
      lines.append(f"  {_with_access(race.first)}")
      lines.append(f"    and{other} {_with_access(race.second)}{times}")
    if len(shown) < len(entries):
      more = sum(len(e.races) for e in entries[len(shown) :])
      lines.append(
        f"  ... and {more} more pair{'s' * (more != 1)} like these "
        "(all are in the list races() returns)"
      )
    lines.append(_once(FIX_LINE, group.fix, said))
    if group.undeclared:
      lines.append(
        "  Undeclared targets in these pairs: " + ", ".join(group.undeclared)
      )
      for note in group.notes:
        # Once per report: a run's report repeats it with its notes.
        if said is None or note not in said:
          lines.append(f"  {note}")
          if said is not None:
            said.add(note)
  lines += left_out_lines(findings)
  if findings.applied:
    lines.append(_once(APPLIED_LINE, "; ".join(findings.applied) + ".", said))
  return lines


def left_out_lines(findings: Findings) -> list[str]:
  """What declared safe pairs left out, by entry: no line when nothing."""
  excused = findings.left_out_count
  if not excused:
    return []
  head = f"{excused} more pair{'s' * (excused != 1)} left out as safe"
  if len(findings.left_out) == 1:
    return [f"{head}: {findings.left_out[0]}"]
  return [f"{head}:", *(f"  {s.count} x {s}" for s in findings.left_out)]


def _once(start: str, text: str, said: set[str] | None) -> str:
  """``start + text``, or ``start + "as above."`` when `said` holds it."""
  if said is None:
    return start + text
  if text in said:
    return f"{start}as above."
  said.add(text)
  return start + text


def _with_access(op: Op) -> str:
  what, rest = op.label().split(" ", 1)
  return f"{what} ({op.access_text}) {rest}"


def empty_witness_note(entangles: Sequence[Op]) -> str:
  count = len(entangles)
  lines = [
    f"Note: {count} entangle call{'s' * (count != 1)} here only "
    f"{'have' if count != 1 else 'has'} zero-size witnesses, which order "
    "nothing (an array with no elements holds no bytes to depend on; XLA "
    "replaces it by an empty constant). Pass a witness with at least one "
    "element, such as the read's result itself:"
  ]
  lines += [f"  {op.label()}" for op in entangles]
  return "\n".join(lines)


NOT_CHECKED = "Not checked"
"""How a report begins the reason a module could not be checked."""


def module_report(
  result: ModuleResult,
  shown_per_group: int | None = SHOWN_PER_GROUP,
  said: set[str] | None = None,
) -> str:
  """One module's part of a report: its name and file, its grouped pairs
  (`findings_lines`, with `said`)."""
  if result.unchecked:
    lines = [f"{NOT_CHECKED}: {result.unchecked}"]
  elif result.reported:
    lines = findings_lines(result.findings, shown_per_group, said)
  else:
    lines = [NO_RACES]
    if result.declared:
      # They decided the answer: say which, as a racing report does.
      lines.append(_once(APPLIED_LINE, "; ".join(result.declared) + ".", said))
  test = f", compiled by {result.test}" if result.test else ""
  return "\n".join([f"== {result.module} ({result.path}){test}", *lines])


def module_reports(
  results: Sequence[ModuleResult],
  shown_per_group: int | None = SHOWN_PER_GROUP,
) -> list[str]:
  """The reports of the modules among `results` that race, where
  declared safe pairs left pairs out, or that could not be checked, each
  fix and each list of applied declarations written in full the first
  time only."""
  said: set[str] = set()
  return [
    module_report(r, shown_per_group, said) for r in results if r.reported
  ]


def summary(run: Run) -> str:
  """One line: modules checked, with native calls, with races, pairs,
  the pairs declared safe pairs left out (when some were), and the
  modules that could not be checked (when some could not)."""
  unchecked = len(run.unchecked)
  checked = len(run.results) - unchecked
  excused = run.left_out
  safe = (
    f"; {excused} more pair{'s' * (excused != 1)} left out as safe by "
    "declared safe_pairs"
    if excused
    else ""
  )
  not_checked = (
    f" {unchecked} module{'s' * (unchecked != 1)} could not be checked "
    "(see above): not proven free of races."
    if unchecked
    else ""
  )
  return (
    f"Checked {checked} module{'s' * (checked != 1)} "
    f"({run.with_native_calls} with native calls): {len(run.racing)} with "
    f"races, {run.pairs} pair{'s' * (run.pairs != 1)}{safe}.{not_checked}"
  )


GPU_MODEL = (
  "XLA:GPU runs a module's thunks in order on one stream by default, but "
  "the order of calls with no data dependency between them is its "
  "scheduler's choice, and concurrent command buffers (CUDA graphs), "
  "stream annotations and async wrappers run such calls at once: there "
  'too, "not ordered" is a race, and the check reports it as on CPU.'
)
"""What the check assumes of a GPU module (docs/finding_races.md, "What
the check can and cannot see", cites XLA's sources)."""

OTHER_MODEL = (
  "the rules describe XLA:CPU's runtime (a call starts once its operands "
  "are written); there the check assumes the same, and a module without "
  "races is not proven race-free on that platform."
)


def _modules_for(results: Sequence[ModuleResult]) -> str:
  """``N module(s) for`` the platforms of `results`, as reports name them."""
  count = len(results)
  unnamed = (
    f"a platform {'its file does' if count == 1 else 'their files do'} not "
    "name (XLA names none for a module it loaded from JAX's persistent "
    "compilation cache)"
  )
  names = sorted({str(r.platform) if r.platform else unnamed for r in results})
  return f"{count} module{'s' * (count != 1)} for {', '.join(names)}"


def platform_note(run: Run) -> str | None:
  """What the check assumed of modules for platforms other than CPU: the
  model of XLA:GPU for GPU modules, XLA:CPU's for any other (a line each)."""
  notes = []
  if gpu := run.gpu_modules:
    notes.append(f"Note: {_modules_for(gpu)}: {GPU_MODEL}")
  if others := run.other_platforms:
    notes.append(f"Note: {_modules_for(others)}: {OTHER_MODEL}")
  return "\n".join(notes) or None


BLIND_TEXT = (
  "XLA compiled modules but dumped none: its backend started before "
  "the race check asked for a dump (XLA reads XLA_FLAGS once). Start the "
  "check before anything uses jax, or run with "
  'XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" and '
  "python -m entangle_jax.testing DIR."
)

REPLACED_TEXT = (
  "XLA compiled modules but dumped none: XLA_FLAGS no longer asks for "
  "the dump (something replaced it, as os.environ['XLA_FLAGS'] = ... in "
  "a conftest.py does). Add your flags to XLA_FLAGS instead of replacing "
  "it."
)


def coverage_notes(coverage: Coverage) -> list[str]:
  """What the results alone do not say: compiles not seen, cache hits."""
  notes = []
  if coverage.blind:
    notes.append(REPLACED_TEXT if coverage.replaced else BLIND_TEXT)
  hits, unchecked = coverage.cache_hits, coverage.unchecked
  if hits and not unchecked:
    notes.append(
      f"{hits} compile(s) came from JAX's persistent compilation cache; "
      "the modules XLA dumped as it loaded them were checked."
    )
  elif hits:
    notes.append(
      f"{hits} compile(s) came from JAX's persistent compilation cache; "
      f"{unchecked} of them left no module to check (this XLA dumps "
      "nothing for a module it loads from the cache): not proven free of "
      "races. Switch the cache off to check them."
    )
  return notes


def run_notes(run: Run) -> list[str]:
  """The run's coverage notes, its notes on shipped bindings installed at
  versions their declarations do not cover (`Run.version_notes`), then its
  platform note."""
  platform = platform_note(run)
  return [
    *coverage_notes(run.coverage),
    *run.version_notes,
    *([platform] if platform else []),
  ]


def render(run: Run, shown_per_group: int | None) -> str:
  """The command's report: each racing module with its grouped pairs,
  what the run could not see, the summary."""
  lines = []
  for report in module_reports(run.results, shown_per_group):
    lines += [report, ""]
  lines += run_notes(run)
  lines.append(summary(run))
  return "\n".join(lines)
