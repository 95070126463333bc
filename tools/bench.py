#!/usr/bin/env python3
"""Benchmarks entangle-jax against its peers, with the noise of the run.

Compared: entangle-jax (this checkout), entangle-jax 0.1.1 (the PyPI
package, installed by this script into a venv of its own under the cache
dir, since both import as ``entangle_jax``), ``jax.lax.optimization_barrier``,
a plain identity (the baseline) and the identity again (the noise floor: what
difference this machine reports between two identical programs).

Each implementation runs in its own subprocess (``tools/bench_worker.py``),
and every round runs all of them, in an order that rotates from round to
round, so that a slow minute on a shared machine hits every implementation
alike. Every comparison pairs values of the same round. Writes
``results.md`` (README-ready), ``results.json`` (every round) and
``results.png`` to ``--out``.

  uv run --group bench python tools/bench.py           # full run, 8 to 10 min
  uv run --group bench python tools/bench.py --quick   # 3 to 5 min

On a busy 2-core machine a full run took 8 to 10 minutes; most of it is
subprocess start-up and compilation, and one entangle of 2000 payload leaves
takes about half a minute to compile.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import bench_report
from bench_report import COMPILE_IMPLS, IMPLS, NOISE, PEER
from bench_worker import SCAN_STEPS

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKER = pathlib.Path(__file__).resolve().with_name("bench_worker.py")
PEER_VERSION = PEER.split()[-1]


def cache_dir() -> pathlib.Path:
  default = pathlib.Path.home() / ".cache" / "entangle-jax"
  return pathlib.Path(os.environ.get("ENTANGLE_JAX_CACHE", default))


def peer_python() -> pathlib.Path:
  """A venv holding the peer package, created on first use."""
  venv = cache_dir() / f"peer-{PEER_VERSION}"
  python = venv / "bin" / "python"
  if not python.exists():
    subprocess.run(
      ["uv", "venv", "--quiet", "--allow-existing", str(venv)], check=True
    )
    subprocess.run(
      [
        "uv",
        "pip",
        "install",
        "--quiet",
        "--python",
        str(python),
        f"entangle-jax=={PEER_VERSION}",
      ],
      check=True,
    )
  return python


def peer_extension(python: pathlib.Path) -> str:
  """Path of the peer's compiled extension, which registers its handler."""
  venv = python.parent.parent
  found = sorted(venv.glob("lib/python*/site-packages/entangle_jax/_ffi*.so"))
  if not found:
    raise FileNotFoundError(f"no entangle_jax/_ffi*.so under {venv}")
  return str(found[0])


def native_extension() -> str:
  """Path of this checkout's example-resource extension."""
  from entangle_jax.testing import _example_resource

  return str(_example_resource._load_host().__file__)


class Workers:
  """Runs one measurement of one implementation in a fresh subprocess."""

  def __init__(self, quick: bool):
    self.quick = quick
    self.peer = peer_python()
    self.native = native_extension()

  def run(self, impl: str, part: str) -> dict:
    command = [sys.executable, str(WORKER), "--impl", impl, "--part", part]
    cwd = ROOT
    if part == "handlers":
      command += ["--peer-extension", peer_extension(self.peer)]
    if impl == PEER:
      # The peer venv must not see this checkout's package: run elsewhere,
      # and load only the example resource's extension from this checkout.
      command[0] = str(self.peer)
      command += ["--native", self.native]
      cwd = cache_dir()
    if self.quick:
      command.append("--quick")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
      command, capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    if out.returncode != 0:
      raise RuntimeError(
        f"worker {impl} ({part}) failed:\n{out.stderr[-3000:]}"
      )
    return json.loads(out.stdout.strip().splitlines()[-1])


def round_order(impls: tuple[str, ...], r: int) -> list[str]:
  """Round ``r``'s order: rotated by ``r``, reversed every other round."""
  rotated = list(impls[r % len(impls) :] + impls[: r % len(impls)])
  return rotated[::-1] if r % 2 else rotated


def alternate(workers: Workers, impls, part: str, rounds: int, log) -> dict:
  results: dict[str, list[dict]] = {impl: [] for impl in impls}
  for r in range(rounds):
    for impl in round_order(tuple(impls), r):
      log(f"{part} round {r + 1}/{rounds}: {impl}")
      results[impl].append(workers.run(impl, part))
  return results


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

  ours = found[bench_report.OURS]["versions"]
  peer = found[PEER]["versions"]
  return f"this checkout: {describe(ours)}; peer venv: {describe(peer)}"


def _load() -> str:
  return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--quick", action="store_true", help="fewer rounds, sizes and repeats"
  )
  parser.add_argument("--rounds", type=int, help="timing rounds (default 7)")
  parser.add_argument(
    "--compile-rounds", type=int, help="compile-time rounds (default 3)"
  )
  parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench-out")
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

  workers = Workers(args.quick)
  structure = {}
  for impl in IMPLS:
    if impl != NOISE:
      log(f"structure: {impl}")
      structure[impl] = workers.run(impl, "structure")
  log("handlers: this checkout's and the peer's, in one process")
  handlers = workers.run(bench_report.OURS, "handlers")["handler_ns"]
  timings = alternate(workers, IMPLS, "timing", timing_rounds, log)
  compiles = alternate(workers, COMPILE_IMPLS, "compile", compile_rounds, log)

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
    "derived": bench_report.derive(timings, SCAN_STEPS),
    "compile": {
      impl: [r["compile_s"] for r in rounds]
      for impl, rounds in compiles.items()
    },
    "structure": structure,
    "handlers": handlers,
  }
  args.out.mkdir(parents=True, exist_ok=True)
  report = bench_report.markdown(results)
  (args.out / "results.md").write_text(report)
  (args.out / "results.json").write_text(json.dumps(results, indent=1))
  bench_report.chart(results, args.out / "results.png")
  print(report)
  print(f"wrote {args.out}/results.md, results.json, results.png")
  return 0


if __name__ == "__main__":
  sys.exit(main())
