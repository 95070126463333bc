"""The sentences every emitter says of a run as a whole: the summary
line, what was assumed of a platform, what a watched run could not see;
and those of a cross-rank run (``--ranks``): its summary, each finding in
one sentence."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax._src import reason_words
from entangle_jax._src.reason_words import left_out_count, safe_pair_named
from entangle_jax._src.targets import platforms
from entangle_jax.testing._findings.rank_findings import (
  RankFinding,
  RankModule,
  RankRun,
)
from entangle_jax.testing._findings.records import (
  Coverage,
  Finding,
  ModuleResult,
  ReportedCall,
  Run,
  SafeCount,
)


def summary(run: Run) -> str:
  """One line: modules checked, with native calls, with races, pairs,
  the pairs declared safe pairs left out (when some were), and the
  modules that could not be checked (when some could not)."""
  unchecked = len(run.unchecked)
  checked = len(run.results) - unchecked
  excused = run.left_out
  safe = (
    f"; {left_out_count(excused, 'more')} "
    + left_out_by([s for r in run.results for s in r.findings.left_out])
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


def left_out_by(left_out: Sequence[SafeCount]) -> str:
  """Why the entries of `left_out` left their pairs out as safe, in words
  (`reason_words.left_out_by`)."""
  return reason_words.left_out_by(s.pair.reason for s in left_out)


def call_words(site: ReportedCall) -> str:
  """A call as a one-line report names it: target, user line, access."""
  where = f" at {site.location}" if site.location else ""
  return f"`{site.name}`{where} ({site.access})"


def finding_ends(entry: Finding) -> tuple[ReportedCall, ReportedCall]:
  """The call a one-line report of `entry` is placed at (the later one,
  where it has a user line) and the other."""
  pair = entry.pair
  here = pair.second if pair.second.location else pair.first
  other = pair.first if here is pair.second else pair.second
  return here, other


def finding_sentence(entry: Finding, fix: str) -> str:
  """`entry` in one sentence, from the call it is placed at, with `fix`:
  what GitHub's annotation and SARIF's result say."""
  here, other = finding_ends(entry)
  times = len(entry.pairs)
  count = f" ({times} pairs on these lines)" if times > 1 else ""
  devices = ", on another device," if entry.pair.across_devices else ""
  return (
    f"{call_words(here)} may run before or after{devices} "
    f"{call_words(other)}{count}: {entry.cause.headline}. Fix: {fix}"
  )


def safe_entry(safe: SafeCount) -> str:
  """The declared safe pair that left `safe`'s pairs out: its two
  targets, why, and where it was declared (`reason_words.safe_pair_named`)."""
  return safe_pair_named(safe.pair)


def left_out_list(left_out: Sequence[SafeCount]) -> list[str]:
  """A line for each entry of `left_out`, indented: how many pairs it
  left out, and the entry (`safe_entry`)."""
  return [f"  {s.count} x {safe_entry(s)}" for s in left_out]


def left_out_as_safe(result: ModuleResult, safe: SafeCount) -> str:
  """One sentence for the pairs of `result`'s module that the declared
  safe pair of `safe` left out (the notices of GitHub and SARIF)."""
  return (
    f"{left_out_count(safe.count, 'each')} by {safe_entry(safe)}. Module "
    f"{result.module} ({result.path})."
  )


GPU_MODEL = platforms.CUDA.model
"""What the check assumes of a GPU module (`platforms.Platform.model`)."""
TPU_MODEL = platforms.TPU.model
"""What the check assumes of a TPU module (`platforms.Platform.model`)."""

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
  """What the check assumed of modules for platforms other than CPU: for
  each runtime of the platform table with a model (`Platform.model`: the
  model of XLA:GPU for GPU modules, TPU's for TPU modules), in the
  table's order, then XLA:CPU's for any other platform (a line each).
  Only modules the check read count: a file it could not read (named with
  its reason elsewhere) had nothing assumed of it."""

  def read(results: list[ModuleResult]) -> list[ModuleResult]:
    return [r for r in results if r.unchecked is None]

  notes = []
  for runtime in platforms.RUNTIMES:
    model = platforms.model_of(runtime)
    if model is not None and (modules := read(run.modules_run_by(runtime))):
      notes.append(f"Note: {_modules_for(modules)}: {model}")
  if others := read(run.other_platforms):
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


def unseen_notes(run: Run) -> list[str]:
  """One note for the modules checked as XLA optimized them only
  (`ModuleResult.unseen`), naming them and why."""
  unseen = [r for r in run.results if r.unseen and not r.unchecked]
  if not unseen:
    return []
  names = ", ".join(r.module for r in unseen[:5])
  more = f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""
  count = len(unseen)
  return [
    f"Note: {count} module{'s' * (count != 1)} ({names}{more}) "
    f"{'were' if count != 1 else 'was'} checked without the program's "
    f"order: {unseen[0].unseen}."
  ]


def run_notes(run: Run) -> list[str]:
  """The run's coverage notes, its notes on shipped bindings installed at
  versions their declarations do not cover (`Run.version_notes`), then its
  platform note."""
  platform = platform_note(run)
  return [
    *unseen_notes(run),
    *coverage_notes(run.coverage),
    *run.version_notes,
    *([platform] if platform else []),
  ]


# The cross-rank check ----------------------------------------------------


def rank_module_name(module: RankModule) -> str:
  """How a report names a cross-rank module: its name and each rank's
  file, or what the ranks' lists of modules are."""
  if module.name is None:
    return f"the ranks' communicating modules ({', '.join(module.files)})"
  return f"module {module.name} ({', '.join(module.files)})"


def rank_finding_sentence(finding: RankFinding) -> str:
  """`finding` in one sentence, every rank's call with its line, then the
  whole fix: what GitHub's annotation and SARIF's result say."""
  sites = "; ".join(f"rank {s.rank}: {s.what}" for s in finding.sites)
  detail = f" ({finding.detail})" if finding.detail else ""
  return f"{finding.headline}: {sites}{detail}. Fix: {finding.fix}"


def rank_summary(run: RankRun) -> str:
  """One line: ranks, modules compared, how many proved, and the
  findings by kind."""
  checked = len(run.modules)
  proved = sum(m.proved for m in run.modules)
  counts: dict[str, int] = {}
  for _, finding in run.findings:
    counts[finding.kind.verdict] = counts.get(finding.kind.verdict, 0) + 1
  found = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
  by_type = sum(m.verdict == "matched-by-type" for m in run.modules)
  unseen = sum(m.verdict == "unseen-communicators" for m in run.modules)
  return (
    f"Checked {checked} communicating module{'s' * (checked != 1)} across "
    f"{run.ranks} rank{'s' * (run.ranks != 1)}: {proved} proved"
    + (f", {by_type} matched by type only (not proved)" if by_type else "")
    + (f", {unseen} on communicators not seen (not proved)" if unseen else "")
    + (f"; findings: {found}." if found else ".")
    + (f" NOT PROVED: {run.unproved}" if run.unproved else "")
  )
