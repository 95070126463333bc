"""What ``in_program_order`` adds to the time to trace, lower and compile a
program with many native calls, side by side with plain ``jax.jit``.

  uv run python -m benchmarks.program_order_compile [--calls 1000] [--rounds 5]

Two programs, each of ``--calls`` native calls:

* ``store``: the example store, each slot (of 64) written and read back
  (``write_slot`` then ``read_slot`` on its token), half the calls each;
* ``klujax``: that many ``klujax.solve_with_numeric`` solves on one
  factorization (a 2-D Poisson matrix on a 10 x 10 grid), each with its own
  right-hand side: every pair shares the factorization's workspace, so the
  transform chains them (one ``entangle`` a solve after the first). Skipped
  where klujax or scipy is not installed.

Each round measures, for each program, ``jax.jit(f).lower(*args)`` then
``.compile()``, plain and under ``jax.jit(in_program_order(f))``, in an
order that alternates from round to round (`benchmarks.rounds`), after
``jax.clear_caches()`` so that nothing is taken from JAX's caches; the
transform's own per-process cache of lowered binding primitives is kept,
as in a program that traces many functions. One process for all: a round's
two programs see the same machine. It takes the wall time and the CPU time
(user + system of every thread: XLA compiles on several), and per round the
ratio ordered / plain of each; it prints the median ratio over rounds with
its range and a 95% bootstrap interval, as a Markdown table, and checks
that the ordered module holds the entangle calls it should (``--json``
also writes every round). Timings are figures to read, never assertions.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import resource
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jaxlib

import entangle_jax
from benchmarks import stats
from benchmarks.rounds import round_order
from entangle_jax import in_program_order, testing
from entangle_jax._src.targets.names import ENTANGLE_TARGET

PLAIN = "plain"
ORDERED = "in_program_order"


@dataclasses.dataclass
class Program:
  """A program of native calls: its function and arguments."""

  name: str
  fn: Callable
  args: tuple


def store_program(calls: int, slots: int = 64) -> Program:
  def store(x):
    reads = []
    for k in range(calls // 2):
      token = testing.write_slot(k % slots, x + k)
      reads.append(testing.read_slot(token))
    return jnp.stack(reads)

  return Program("store", store, (jnp.float32(1.0),))


def klujax_program(calls: int) -> Program | None:
  if not all(importlib.util.find_spec(m) for m in ("klujax", "scipy")):
    return None
  import klujax
  import scipy.sparse

  # klujax's handles are 64-bit: it switches 64-bit types on when imported.
  jax.config.update("jax_enable_x64", True)
  n = 10
  t = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
  eye = scipy.sparse.identity(n)
  a = (scipy.sparse.kron(eye, t) + scipy.sparse.kron(t, eye)).tocoo()
  ai, aj = jnp.asarray(a.row, jnp.int32), jnp.asarray(a.col, jnp.int32)
  symbolic = klujax.analyze(ai, aj, n * n)
  numeric = klujax.factor(ai, aj, jnp.asarray(a.data), symbolic)

  def solves(b):
    return [
      klujax.solve_with_numeric(numeric, b + k, symbolic) for k in range(calls)
    ]

  return Program("klujax", solves, (jnp.ones(n * n),))


def _cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def measure(fn: Callable, args: tuple) -> dict:
  """Seconds (wall and CPU) to trace and lower, and to compile, `fn`; and
  the entangle calls in its compiled module."""

  jax.clear_caches()
  wall, cpu = time.perf_counter(), _cpu()
  lowered = jax.jit(fn).lower(*args)
  wall_lower, cpu_lower = time.perf_counter() - wall, _cpu() - cpu
  wall, cpu = time.perf_counter(), _cpu()
  compiled = lowered.compile()
  wall_compile, cpu_compile = time.perf_counter() - wall, _cpu() - cpu
  text = testing.module_text(compiled)
  return {
    "wall_lower": wall_lower,
    "wall_compile": wall_compile,
    "wall": wall_lower + wall_compile,
    "cpu": cpu_lower + cpu_compile,
    "entangles": text.count(f'custom_call_target="{ENTANGLE_TARGET}"'),
  }


def run(
  calls: int, rounds: int, log: Callable[[str], None], slots: int = 64
) -> dict:
  """Every round of each program (`slots`: of the store's 64, how many the
  store program writes)."""
  programs = [store_program(calls, slots)]
  found = klujax_program(calls)
  if found is None:
    log("klujax: skipped, klujax or scipy is not installed")
  else:
    programs.append(found)
  results: dict = {}
  for program in programs:
    fns = {PLAIN: program.fn, ORDERED: in_program_order(program.fn)}
    runs: dict[str, list[dict]] = {PLAIN: [], ORDERED: []}
    for r in range(rounds):
      for name in round_order([PLAIN, ORDERED], r):
        log(f"{program.name} round {r + 1}/{rounds}: {name}")
        runs[name].append(measure(fns[name], program.args))
    results[program.name] = runs
  return results


def summary(results: dict) -> list[str]:
  """The Markdown table of `results` (`run`)."""
  lines = [
    "| program | plain, s (median) | in_program_order, s (median) | "
    "ratio, wall: median (range; 95% CI) | ratio, CPU: median (range) | "
    "entangle calls |",
    "|---|---|---|---|---|---|",
  ]
  for name, runs in results.items():
    plain, ordered = runs[PLAIN], runs[ORDERED]
    wall = stats.ratios(
      [o["wall"] for o in ordered], [p["wall"] for p in plain]
    )
    cpu = stats.ratios([o["cpu"] for o in ordered], [p["cpu"] for p in plain])
    w, c = stats.spread(wall), stats.spread(cpu)
    low, high = stats.bootstrap_ci(wall)
    median_plain = stats.spread([p["wall"] for p in plain]).median
    median_ordered = stats.spread([o["wall"] for o in ordered]).median
    lines.append(
      f"| {name} | {median_plain:.2f} | {median_ordered:.2f} | "
      f"{w.median:.2f}x ({w.low:.2f}…{w.high:.2f}; {low:.2f}…{high:.2f}) | "
      f"{c.median:.2f}x ({c.low:.2f}…{c.high:.2f}) | "
      f"{ordered[0]['entangles']} |"
    )
  return lines


def _load() -> str:
  return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.program_order_compile",
    description=__doc__.splitlines()[0],
  )
  parser.add_argument("--calls", type=int, default=1000)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--json", type=pathlib.Path)
  args = parser.parse_args(argv)
  if args.rounds < 2:
    parser.error("a spread needs at least 2 rounds")
  start = time.monotonic()
  load_start = _load()

  def log(message: str) -> None:
    elapsed = time.monotonic() - start
    print(f"[{elapsed:6.0f} s] {message}", file=sys.stderr, flush=True)

  results = run(args.calls, args.rounds, log)
  versions = (
    f"entangle-jax {entangle_jax.__version__}, jax {jax.__version__}, "
    f"jaxlib {jaxlib.__version__}, Python {platform.python_version()}"
  )
  if importlib.util.find_spec("klujax"):
    versions += f", klujax {importlib.metadata.version('klujax')}"
  print(
    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
    f"{platform.machine()}, {os.cpu_count()} cores; {versions}; "
    f"{args.calls} native calls a program; {args.rounds} alternating "
    f"rounds; load average {load_start} at the start, {_load()} at the "
    f"end; the run took {(time.monotonic() - start) / 60:.1f} min."
  )
  print()
  print("\n".join(summary(results)))
  if args.json is not None:
    args.json.write_text(json.dumps(results, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
