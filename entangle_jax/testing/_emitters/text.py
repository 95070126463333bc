"""The text emitter: what people read, from the findings records alone:
a single-process run's (`entangle_jax.testing._findings.records.Run`)
and a cross-rank run's (`rank_findings.RankRun`: each module's report as
the check wrote it, each problem with its code and fix, then the run's
summary)."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax._src.reason_words import left_out_count
from entangle_jax.testing._emitters.options import SHOWN_PER_GROUP, Options
from entangle_jax.testing._emitters.sentences import (
  left_out_by,
  left_out_list,
  rank_summary,
  run_notes,
  safe_entry,
  summary,
)
from entangle_jax.testing._findings.causes import ORDER_FIX
from entangle_jax.testing._findings.rank_findings import RankRun
from entangle_jax.testing._findings.records import (
  Findings,
  ModuleResult,
  Pair,
  ReportedCall,
  Run,
)

FIX_HINT = "Usual fix: " + ORDER_FIX

FIX_LINE = "  Fix: "
APPLIED_LINE = "Declarations applied: "
NO_RACES = "No races: every two calls that may conflict are ordered."
INCOMPLETE = "Not every compile was checked."


def label(site: ReportedCall) -> str:
  """One line naming the call as the user wrote it."""
  parts = [site.name]
  if site.scope:
    parts.append(f"scope {site.scope!r}")
  if site.location:
    parts.append(f"at {site.location}")
    if site.binding_location:
      parts.append(f"(in the binding at {site.binding_location})")
  parts.append(f"(%{site.instruction})")
  if site.backward:
    parts.append("[backward pass]")
  return " ".join(parts)


def _with_access(site: ReportedCall) -> str:
  what, rest = label(site).split(" ", 1)
  return f"{what} ({site.access}) {rest}"


def unordered_lines(heading: str, pairs: Sequence[Pair]) -> str:
  """Pairs where the first is not ordered before the second, under
  `heading`, with the usual fix."""
  lines = [heading]
  for pair in pairs:
    lines.append(f"  {label(pair.first)}")
    lines.append(f"    is not ordered before {label(pair.second)}")
  return "\n".join([*lines, FIX_HINT])


def no_races(declared: Sequence[str]) -> str:
  """A report without pairs, naming the declarations that decided it."""
  if declared:
    return f"{NO_RACES}\n{APPLIED_LINE}{'; '.join(declared)}."
  return NO_RACES


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
    by = left_out_by(findings.left_out)
    trusted = " (taken at their word, not checked)" if "declared" in by else ""
    lines = [
      f"{left_out_count(excused, 'all')} {by}{trusted}:",
      *left_out_list(findings.left_out),
    ]
    if findings.applied:
      lines.append(_once(APPLIED_LINE, "; ".join(findings.applied) + ".", said))
    return lines
  lines = [
    f"{count} pair{'s' * (count != 1)} of calls may conflict and run in "
    f"either order{reasons}:"
  ]
  for group in causes:
    code = f" [{group.cause.code}]"
    if len(causes) > 1 or group.count > 1:
      lines.append(f"{group.count} x {group.cause.headline}{code}:")
    else:
      lines.append(f"{group.cause.headline}{code}:")
    entries = group.entries
    shown = entries if shown_per_group is None else entries[:shown_per_group]
    for entry in shown:
      race = entry.pair
      other = ", on another device," if race.across_devices else ""
      same = len(entry.pairs)
      times = f" ({same} pairs on these lines)" if same > 1 else ""
      lines.append(f"  {_with_access(race.first)}")
      lines.append(f"    and{other} {_with_access(race.second)}{times}")
    if len(shown) < len(entries):
      more = sum(len(e.pairs) for e in entries[len(shown) :])
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
  head = left_out_count(excused, "more")
  if len(findings.left_out) == 1:
    return [f"{head}: {safe_entry(findings.left_out[0])}"]
  return [f"{head}:", *left_out_list(findings.left_out)]


def _once(start: str, text: str, said: set[str] | None) -> str:
  """``start + text``, or ``start + "as above."`` when `said` holds it."""
  if said is None:
    return start + text
  if text in said:
    return f"{start}as above."
  said.add(text)
  return start + text


def empty_witness_note(entangles: Sequence[ReportedCall]) -> str:
  count = len(entangles)
  lines = [
    f"Note: {count} entangle call{'s' * (count != 1)} here only "
    f"{'have' if count != 1 else 'has'} zero-size witnesses, which order "
    "nothing (an array with no elements holds no bytes to depend on; XLA "
    "replaces it by an empty constant). Pass a witness with at least one "
    "element, such as the read's result itself:"
  ]
  lines += [f"  {label(site)}" for site in entangles]
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


def render(run: Run | RankRun, options: Options | None = None) -> str:
  """A run's report: where the declarations came from (when the way in
  says), each module that races or could not be checked (but those the way
  in showed already) with its grouped pairs, each repeated fix or list of
  declarations once; the way in's notes, what the run could not see, the
  summary. A cross-rank run's: `ranks_report`."""
  if isinstance(run, RankRun):
    return ranks_report(run)
  options = options or Options()
  lines = []
  if run.declarations is not None:
    lines.append(run.declarations.said)
  said: set[str] = set()
  for index, result in enumerate(run.results):
    if result.reported and index not in options.shown_elsewhere:
      lines += [module_report(result, options.shown_per_group, said), ""]
  lines += options.notes
  lines += run_notes(run)
  if run.coverage.incomplete:
    lines.append(INCOMPLETE)
  lines.append(summary(run))
  return "\n".join(lines)


def pairs_report(
  findings: Findings,
  declared: Sequence[str] = (),
  shown_per_group: int | None = SHOWN_PER_GROUP,
) -> str:
  """The report of one list of pairs (``format_races``)."""
  if not findings.count and not findings.left_out:
    return no_races(declared)
  return "\n".join(findings_lines(findings, shown_per_group, said=None))


# The cross-rank check ----------------------------------------------------

NOTHING_ACROSS_RANKS = (
  "No communicating calls in any rank's modules: nothing to compare, "
  "nothing proved. XLA's collectives are read from the modules; a native "
  "call communicates only where a declaration says so."
)


def ranks_report(run: RankRun) -> str:
  """A cross-rank run's report: each module's heading (its name and each
  rank's file) and report, then the summary."""
  lines = []
  for module in run.modules:
    if module.name is not None:
      lines.append(f"{module.name} ({', '.join(module.files)}):")
    lines.append(module.report)
  if not run.modules:
    lines.append(NOTHING_ACROSS_RANKS)
  lines.append(rank_summary(run))
  return "\n".join(lines)
