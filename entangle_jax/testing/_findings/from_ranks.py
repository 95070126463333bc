"""The cross-rank check's results as findings records
(`entangle_jax.testing._findings.rank_findings`), which the emitters write
in every format: one `RankFinding` for each problem a `CrossRankResult`
holds, each rank's call with its user's file and line."""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._analysis.across_ranks import (
  CrossRankResult,
  RankCall,
)
from entangle_jax.testing._findings import rank_findings as kinds
from entangle_jax.testing._findings.rank_findings import (
  RankFinding,
  RankModule,
  RankSite,
  split_location,
)


def _site(rank: int, what: str, location: str | None) -> RankSite:
  path, line = split_location(location)
  return RankSite(rank, what, path, line)


def _call_site(rank: int, call: RankCall | None, none: str, verb: str):
  if call is None:
    return RankSite(rank, none)
  return _site(rank, f"{verb}call {call.index}: {call.label}", call.location)


def findings_of(result: CrossRankResult) -> tuple[RankFinding, ...]:
  """Every problem of `result`, in the order its text gives them: the
  loops and conditionals under rank-dependent control, the pairs of calls
  nothing orders, the mismatch, the deadlock. None when proved."""
  found: list[RankFinding] = []
  for r in result.rank_dependent:
    found.append(
      RankFinding(
        kinds.RANK_DEPENDENT,
        f"Rank-dependent control: communicating calls sit under a "
        f"{r.construct} whose decision may differ between ranks",
        tuple(
          _site(rank, f"{r.construct} {r.label}", r.location)
          for rank in r.ranks
        ),
        f"it decides on {r.depends_on}; it holds {'; '.join(r.calls)}",
      )
    )
  for u in result.unordered:
    found.append(
      RankFinding(
        kinds.POSSIBLE_DEADLOCK,
        f"Possible deadlock: rank {u.rank} may make two communicating "
        "calls in either order (nothing orders them), and another rank in "
        "the other",
        (
          _site(u.rank, u.first, u.first_location),
          _site(u.rank, u.second, u.second_location),
        ),
      )
    )
  if (m := result.mismatch) is not None:
    index = next((c.index for c in m.calls if c is not None), 0)
    found.append(
      RankFinding(
        kinds.MISMATCH,
        f"Mismatch at call {index}: the ranks make different calls",
        tuple(
          _call_site(rank, call, "no more calls", "")
          for rank, call in enumerate(m.calls)
        ),
        f"differs: {m.differs}",
      )
    )
  if (d := result.deadlock) is not None:
    found.append(
      RankFinding(
        kinds.DEADLOCK,
        "Deadlock: no rank can go on",
        tuple(
          _call_site(rank, call, "has made all its calls", "blocked in ")
          for rank, call in enumerate(d.blocked)
        ),
      )
    )
  return tuple(found)


def module_of(
  name: str, files: Sequence[str], result: CrossRankResult
) -> RankModule:
  """One communicating module's record: `result` of checking the ranks'
  `files` across them."""
  return RankModule(
    name,
    tuple(files),
    result.verdict,
    findings_of(result),
    result.text(),
    {"module": name, "files": list(files), **result.to_json()},
    len(result.matched),
  )


def modules_differ(
  folders: Sequence[str],
  names: Sequence[Sequence[str]],
  files: Sequence[Sequence[str]],
) -> RankModule:
  """The record of ranks that compiled different communicating modules:
  rank k's dump `folders[k]` holds modules `names[k]` in `files[k]`, and
  the lists differ. Each rank's site is its module at the first position
  where the lists differ (its folder when it has none there)."""
  longest = max(len(n) for n in names)
  # The first position where the ranks' lists differ.
  differs = next(
    k
    for k in range(longest)
    if len({n[k] if k < len(n) else None for n in names}) > 1
  )
  sites = []
  for rank, (mine, paths) in enumerate(zip(names, files, strict=True)):
    place = paths[differs] if differs < len(paths) else folders[rank]
    count = len(mine)
    sites.append(
      RankSite(
        rank,
        f"compiled {count} communicating module{'s' * (count != 1)} "
        f"({', '.join(mine) or 'none'})",
        place,
      )
    )
  said = "; ".join(f"rank {s.rank} {s.what}" for s in sites)
  report = (
    "Mismatch: the ranks compiled different communicating modules: "
    f"{said}. Ranks that take different Python paths compile "
    "different programs: this check reports them, no transform can fix "
    f"them. [{kinds.MISMATCH.code}]"
  )
  finding = RankFinding(
    kinds.MISMATCH,
    "Mismatch: the ranks compiled different communicating modules",
    tuple(sites),
  )
  data = {
    "verdict": "mismatch",
    "status": 1,
    "modules": [list(n) for n in names],
  }
  return RankModule(None, tuple(folders), "mismatch", (finding,), report, data)
