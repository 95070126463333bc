"""What the race check costs a whole test suite: ``pytest`` plain against
``pytest --entangle-races=fail``, without and with pytest-xdist.

  uv run python -m benchmarks.suite_cost PATH [PATH ...] [--rounds 5]

PATH is the suite, as pytest takes it (a file or a folder); pytest runs in
the folder of the first PATH, so that the suite finds its own
configuration and not this repository's. Nothing is downloaded: get the
suite first (docs/performance.md says how to get klujax 0.5.0's, the suite
the Performance page reports). The suite's packages and pytest-xdist must
be importable by ``--python`` (this interpreter by default), and so must
entangle-jax, for the checked runs.

Each round runs the suite once plain and once checked for each worker
count (``-n 0``, ``-n 2``), plain and checked in an order that alternates
from round to round, so that a busy minute on a shared machine hits both.
Per round and worker count it takes the ratio checked / plain of the wall
time, and of the CPU time (user + system, of pytest and its xdist workers:
what the check adds, less sensitive to other users of the machine than the
wall time). It prints, for each worker count, the median ratio over
rounds, its interquartile range and range, and a 95% bootstrap interval,
as a Markdown table; ``--json`` also writes every round.

The checked runs must report the same test outcomes as the plain ones (a
check that failed tests, or stopped the run, would make the times
incomparable): a difference is printed under the table and makes the
exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks import stats
from benchmarks.rounds import round_order

PLAIN = "plain"
CHECKED = "checked"
_OUTCOME = re.compile(
  r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)"
)
_CHECKED_LINE = re.compile(r"^Checked \d+ modules?.*$", re.MULTILINE)


@dataclasses.dataclass
class Run:
  """One pytest run: seconds of wall and CPU time, exit status, outcomes
  (``{"passed": 61, ...}``) and the race check's summary line."""

  wall: float
  cpu: float
  status: int
  outcomes: dict[str, int]
  check: str | None


def outcomes(output: str) -> dict[str, int]:
  """The counts of pytest's last summary line (``13 failed, 61 passed in
  …``), by outcome; ``error`` and ``errors`` count together."""
  lines = [line for line in output.splitlines() if " in " in line]
  for line in reversed(lines):
    found = _OUTCOME.findall(line)
    if found:
      counts: dict[str, int] = {}
      for n, kind in found:
        kind = "errors" if kind.startswith("error") else kind
        counts[kind] = counts.get(kind, 0) + int(n)
      return counts
  return {}


def command(
  python: str, suite: Sequence[str], workers: int, checked: bool
) -> list[str]:
  """The pytest command line of one run."""
  line = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
  line += ["-n", str(workers), *suite]
  if checked:
    line.append("--entangle-races=fail")
  return line


def environment() -> dict[str, str]:
  """This process's environment less what would switch the check on, or
  dump, in a plain run."""
  env = dict(os.environ)
  env.pop("ENTANGLE_JAX_RACES", None)
  flags = env.get("XLA_FLAGS", "")
  if "--xla_dump_to" in flags:
    raise SystemExit(
      "XLA_FLAGS asks for a dump: the plain runs would dump too. Unset it."
    )
  return env


def run(line: Sequence[str], cwd: pathlib.Path, env: dict[str, str]) -> Run:
  """Runs pytest once; its wall time, and the CPU time of it and of every
  process it waited for (xdist's workers)."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  done = subprocess.run(
    line, cwd=cwd, env=env, capture_output=True, text=True, check=False
  )
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  output = done.stdout + done.stderr
  check = _CHECKED_LINE.search(output)
  return Run(
    wall, cpu, done.returncode, outcomes(output), check and check.group(0)
  )


def ratio_row(label: str, plain: list[Run], checked: list[Run]) -> str:
  """One Markdown row: medians, and the ratios checked / plain over
  rounds (wall: median, IQR, range, 95% CI; CPU: median and IQR)."""
  wall = stats.ratios([r.wall for r in checked], [r.wall for r in plain])
  cpu = stats.ratios([r.cpu for r in checked], [r.cpu for r in plain])
  w, c = stats.spread(wall), stats.spread(cpu)
  if len(wall) > 1:
    lo, hi = stats.bootstrap_ci(wall)
    ci = f"{lo:.2f}-{hi:.2f}x"
  else:
    ci = "-"
  return (
    f"| {label} | {statistics.median(r.wall for r in plain):.1f} s "
    f"| {statistics.median(r.wall for r in checked):.1f} s "
    f"| **{w.median:.2f}x** ({w.q1:.2f}-{w.q3:.2f}; {w.low:.2f}-{w.high:.2f}) "
    f"| {ci} | {c.median:.2f}x ({c.q1:.2f}-{c.q3:.2f}) | {w.n} |"
  )


HEADER = (
  "| pytest | plain (median) | checked (median) "
  "| wall, checked / plain: median (IQR; range) | 95% CI "
  "| CPU, checked / plain (IQR) | rounds |\n"
  "|---|---|---|---|---|---|---|"
)


def _load() -> str:
  return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.suite_cost",
    description=__doc__.split("\n\n")[0],
  )
  parser.add_argument("suite", nargs="+", help="what pytest runs")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument(
    "--workers",
    default="0,2",
    help="pytest-xdist worker counts, comma-separated (default 0,2)",
  )
  parser.add_argument("--python", default=sys.executable)
  parser.add_argument("--json", type=pathlib.Path, help="every round, here")
  args = parser.parse_args(argv)
  workers = [int(w) for w in args.workers.split(",")]
  suite = [str(pathlib.Path(p).resolve()) for p in args.suite]
  first = pathlib.Path(suite[0])
  cwd = first if first.is_dir() else first.parent
  env = environment()
  results: dict[int, dict[str, list[Run]]] = {
    w: {PLAIN: [], CHECKED: []} for w in workers
  }
  load_start, started = (
    _load(),
    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  )
  for r in range(args.rounds):
    for w in workers:
      for name in round_order([PLAIN, CHECKED], r):
        line = command(args.python, suite, w, name == CHECKED)
        done = run(line, cwd, env)
        results[w][name].append(done)
        print(
          f"round {r + 1}/{args.rounds} -n {w} {name}: {done.wall:.1f} s wall, "
          f"{done.cpu:.1f} s CPU, exit {done.status} (load {_load()})",
          file=sys.stderr,
        )
  print(
    f"{args.rounds} rounds, {started}, load average {load_start} at the "
    f"start and {_load()} at the end ({os.cpu_count()} cores)\n"
  )
  print(HEADER)
  for w in workers:
    print(ratio_row(f"-n {w}", results[w][PLAIN], results[w][CHECKED]))
  status = 0
  for w in workers:
    plain = [r.outcomes for r in results[w][PLAIN]]
    checked = [r.outcomes for r in results[w][CHECKED]]
    if any(c != plain[0] for c in plain + checked):
      status = 1
      print(f"\n-n {w}: the outcomes differ: plain {plain}, checked {checked}")
    lines = {r.check for r in results[w][CHECKED]}
    print(f"\n-n {w}: {plain[0]}; the check: {' / '.join(map(str, lines))}")
  if args.json:
    args.json.write_text(
      json.dumps(
        {
          str(w): {k: [dataclasses.asdict(x) for x in v] for k, v in by.items()}
          for w, by in results.items()
        },
        indent=1,
      )
    )
  return status


if __name__ == "__main__":
  sys.exit(main())
