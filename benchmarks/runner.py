"""Benchmarks entangle-jax against its peers, with the noise of the run.

Compared: entangle-jax (this checkout), entangle-jax 0.1.1 (the PyPI
package, installed by this script into a venv of its own under the cache
dir, since both import as ``entangle_jax``), ``jax.lax.optimization_barrier``,
a plain identity (the baseline) and the identity again (the noise floor: what
difference this machine reports between two identical programs).

Each implementation runs in its own subprocess (``benchmarks.worker``), and
every round runs all of them, in an order that rotates from round to round
(``benchmarks.rounds``), so that a slow minute on a shared machine hits every
implementation alike. Every comparison pairs values of the same round.
Writes ``results.md`` (README-ready), ``results.json`` (every round) and
``results.png`` to ``--out``.

  uv run --group bench python -m benchmarks           # full run, 8 to 10 min
  uv run --group bench python -m benchmarks --quick   # 3 to 5 min

On a busy 2-core machine a full run took 8 to 10 minutes; most of it is
subprocess start-up and compilation, and one entangle of 2000 payload leaves
takes about half a minute to compile.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks import chart, comparisons, peer, report
from benchmarks.cases import COMPILE_IMPLS, IMPLS, NOISE, OURS, PEER, SCAN_STEPS
from benchmarks.rounds import alternate

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Workers:
  """Runs one measurement of one implementation in a fresh subprocess."""

  def __init__(self, quick: bool, peer_path: str):
    self.quick = quick
    self.peer_path = peer_path
    self.native = peer.native_extension()

  @functools.cached_property
  def peer(self) -> pathlib.Path:
    """The peer venv's Python, made the first time a part needs it."""
    return peer.python()

  def run(self, impl: str, part: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.worker"]
    command += ["--impl", impl, "--part", part]
    cwd = ROOT
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if part == "handlers":
      command += ["--peer-extension", peer.extension(self.peer)]
    if impl == PEER:
      # The peer venv must not see this checkout's package: run elsewhere,
      # find only the benchmarks package, and load only the example
      # resource's extension from this checkout.
      command[0] = str(self.peer)
      command += ["--native", self.native]
      cwd = peer.cache_dir()
      env["PYTHONPATH"] = self.peer_path
    if self.quick:
      command.append("--quick")
    out = subprocess.run(
      command, capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    if out.returncode != 0:
      raise RuntimeError(
        f"worker {impl} ({part}) failed:\n{out.stderr[-3000:]}"
      )
    return json.loads(out.stdout.strip().splitlines()[-1])

  def alternate(
    self, impls, part: str, rounds: int, log: Callable[[str], None]
  ) -> dict[str, list[dict]]:
    """Every implementation's ``part`` in each of ``rounds`` rounds."""

    def announce(r: int, impl: str) -> None:
      log(f"{part} round {r + 1}/{rounds}: {impl}")

    return alternate(impls, rounds, lambda impl: self.run(impl, part), announce)


def _cpu_model() -> str:
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def _versions(found: dict) -> str:
  def describe(v: dict) -> str:
    package = (
      f"entangle-jax {v['entangle-jax']}, " if "entangle-jax" in v else ""
    )
    return (
      f"{package}jax {v['jax']}, jaxlib {v['jaxlib']}, Python {v['python']}"
    )

  ours = found[OURS]["versions"]
  theirs = found[PEER]["versions"]
  return f"this checkout: {describe(ours)}; peer venv: {describe(theirs)}"


def _load() -> str:
  return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks", description=__doc__.splitlines()[0]
  )
  parser.add_argument(
    "--quick", action="store_true", help="fewer rounds, sizes and repeats"
  )
  parser.add_argument("--rounds", type=int, help="timing rounds (default 7)")
  parser.add_argument(
    "--compile-rounds", type=int, help="compile-time rounds (default 3)"
  )
  parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench-out")
  parser.add_argument(
    "--only-program-order",
    action="store_true",
    help="run only in_program_order against Resource (program_order.md)",
  )
  parser.add_argument(
    "--only-analysis",
    action="store_true",
    help="run only the order analysis's part (its rounds: --compile-rounds)",
  )
  args = parser.parse_args(argv)
  timing_rounds = args.rounds or (3 if args.quick else 7)
  compile_rounds = args.compile_rounds or (2 if args.quick else 3)
  if timing_rounds < 2 or compile_rounds < 2:
    parser.error("a spread needs at least 2 rounds")

  start = time.monotonic()
  load_start = _load()

  def log(message: str) -> None:
    elapsed = time.monotonic() - start
    print(f"[{elapsed:6.0f} s] {message}", file=sys.stderr, flush=True)

  if args.only_analysis:
    return _only_analysis(args, compile_rounds, log, load_start, start)
  if args.only_program_order:
    with peer.isolated_path() as peer_path:
      log("program_order: in_program_order against Resource, in one process")
      found = Workers(args.quick, peer_path).run(OURS, "program_order")
    _write_program_order(args, found, load_start, start)
    return 0
  with peer.isolated_path() as peer_path:
    workers = Workers(args.quick, peer_path)
    structure = {}
    for impl in IMPLS:
      if impl != NOISE:
        log(f"structure: {impl}")
        structure[impl] = workers.run(impl, "structure")
    log("handlers: this checkout's and the peer's, in one process")
    handlers = workers.run(OURS, "handlers")["handler_ns"]
    log("sanitizer: a native call unsanitized, wrapped, and recording")
    sanitizer = workers.run(OURS, "sanitizer")["sanitizer_ns"]
    timings = workers.alternate(IMPLS, "timing", timing_rounds, log)
    compiles = workers.alternate(COMPILE_IMPLS, "compile", compile_rounds, log)
    analysis = workers.alternate([OURS], "analysis", compile_rounds, log)
    dumps = workers.alternate([OURS], "dump_check", compile_rounds, log)
    log("program_order: in_program_order against Resource, in one process")
    program_order = workers.run(OURS, "program_order")

  results = {
    "meta": {
      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      "machine": f"{platform.machine()}, {_cpu_model()}, "
      f"{os.cpu_count()} cores",
      "versions": _versions(structure),
      "timing_rounds": timing_rounds,
      "compile_rounds": compile_rounds,
      "steps": SCAN_STEPS,
      "quick": args.quick,
      "load_start": load_start,
      "load_end": _load(),
      "wall_min": (time.monotonic() - start) / 60,
    },
    "timings": timings,
    "derived": comparisons.derive(timings, SCAN_STEPS),
    "compile": {
      impl: [r["compile_s"] for r in rounds]
      for impl, rounds in compiles.items()
    },
    "structure": structure,
    "handlers": handlers,
    "sanitizer": sanitizer,
    "analysis": [r["analysis_s"] for r in analysis[OURS]],
    "dump_check": [r["dump_check_s"] for r in dumps[OURS]],
  }
  args.out.mkdir(parents=True, exist_ok=True)
  text = report.markdown(results)
  (args.out / "results.md").write_text(text)
  (args.out / "results.json").write_text(json.dumps(results, indent=1))
  chart.chart(results, args.out / "results.png")
  print(text)
  print(f"wrote {args.out}/results.md, results.json, results.png")
  _write_program_order(args, program_order, load_start, start)
  return 0


def _meta(args, ours: dict, prefix: str, load_start: str, start: float):
  """The run's description for a report of one part: when, where, what
  ran (`ours`: a worker's versions) and the load."""
  return {
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "machine": f"{platform.machine()}, {_cpu_model()}, {os.cpu_count()} cores",
    "versions": f"{prefix}entangle-jax {ours['entangle-jax']}, jax "
    f"{ours['jax']}, jaxlib {ours['jaxlib']}, Python {ours['python']}",
    "quick": args.quick,
    "load_start": load_start,
    "load_end": _load(),
    "wall_min": (time.monotonic() - start) / 60,
  }


def _write_program_order(args, found: dict, load_start: str, start: float):
  """Writes the in_program_order part's report, program_order.md (and its
  rounds, program_order.json)."""
  results = {
    "meta": _meta(args, found["versions"], "", load_start, start),
    "program_order": found,
  }
  _write_report(
    args.out, "program_order", results, report.program_order_markdown
  )


def _only_analysis(args, rounds: int, log, load_start: str, start: float):
  """Runs the analysis part alone and writes its report."""
  with peer.isolated_path() as peer_path:
    workers = Workers(args.quick, peer_path)
    found = workers.alternate([OURS], "analysis", rounds, log)[OURS]
    dumps = workers.alternate([OURS], "dump_check", rounds, log)[OURS]
  results = {
    "meta": _meta(
      args, found[0]["versions"], "this checkout: ", load_start, start
    ),
    "analysis": [r["analysis_s"] for r in found],
    "dump_check": [r["dump_check_s"] for r in dumps],
  }
  _write_report(args.out, "analysis", results, report.analysis_markdown)
  return 0


def _write_report(out: pathlib.Path, name: str, results: dict, markdown):
  """Writes `name`.md (`markdown(results)`) and `name`.json to `out`."""
  out.mkdir(parents=True, exist_ok=True)
  text = markdown(results)
  (out / f"{name}.md").write_text(text)
  (out / f"{name}.json").write_text(json.dumps(results, indent=1))
  print(text)
  print(f"wrote {out}/{name}.md, {name}.json")
