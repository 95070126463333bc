"""What ``in_program_order`` adds to the time to trace, lower and compile a
program with many native calls, side by side with plain ``jax.jit``.

  uv run python -m benchmarks.program_order_compile [--calls 1000 ...]
      [--rounds 5] [--programs store traced reads klujax] [--no-compile]

Programs, each of ``--calls`` native calls (``--programs`` picks them):

* ``store``: the example store, each slot (of 64) written and read back
  (``write_slot`` then ``read_slot`` on its token), half the calls each;
* ``traced``: the same on traced handles, ``slots[k % 64]`` of an argument
  array ``slots``: its elements may repeat a slot, so every write comes
  after the read before it (one ``entangle`` a write after the first);
* ``reads``: one write on ``slots[0]``, then reads of ``slots[k % 64]``,
  each after the write (one ``entangle`` for them all, on ``slots``);
* ``klujax``: that many ``klujax.solve_with_numeric`` solves on one
  factorization (a 2-D Poisson matrix on a 10 x 10 grid), each with its own
  right-hand side: every pair shares the factorization's workspace, so the
  transform chains them (one ``entangle`` a solve after the first). Skipped
  where klujax or scipy is not installed.

Each round measures, for each program, ``jax.jit(f).lower(*args)`` then
``.compile()``, plain, under ``jax.jit(in_program_order(f))``, and (for the
store's programs) ordered by hand with the same ``entangle`` calls, in an
order that alternates from round to round (`benchmarks.rounds`), after
``jax.clear_caches()`` so that nothing is taken from JAX's caches; the
transform's own per-process cache of lowered binding primitives is kept,
as in a program that traces many functions. One process for all: a round's
two programs see the same machine. It takes the wall time and the CPU time
(user + system of every thread: XLA compiles on several), and per round the
ratio ordered / plain of each; it prints the median ratio over rounds with
its range and a 95% bootstrap interval, as a Markdown table, and checks
that the ordered module holds the entangle calls it should (``--json``
also writes every round). Several ``--calls`` make a curve, a row each;
``--no-compile`` times tracing and lowering alone (the transform's own
share: XLA's compile of thousands of entangle calls, the same by hand,
grows faster than the calls). Timings are figures to read, never
assertions.
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
from entangle_jax import entangle, in_program_order, testing
from entangle_jax._src.targets.names import ENTANGLE_TARGET

PLAIN = "plain"
ORDERED = "in_program_order"
BY_HAND = "by hand"

PROGRAMS = ("store", "traced", "reads", "klujax")


@dataclasses.dataclass
class Program:
  """A program of native calls: its function and arguments, and the same
  program ordered by hand (None: none written)."""

  name: str
  fn: Callable
  args: tuple
  by_hand: Callable | None = None


def store_program(calls: int, slots: int = 64) -> Program:
  def store(x):
    reads = []
    for k in range(calls // 2):
      token = testing.write_slot(k % slots, x + k)
      reads.append(testing.read_slot(token))
    return jnp.stack(reads)

  def by_hand(x):
    # Each write on a slot written before, after that slot's last read.
    reads: list = []
    last: dict = {}
    for k in range(calls // 2):
      slot = k % slots
      handle = slot
      if slot in last:
        handle = entangle(jnp.int32(slot), last[slot])
      token = testing.write_slot(handle, x + k)
      last[slot] = testing.read_slot(token)
      reads.append(last[slot])
    return jnp.stack(reads)

  return Program("store", store, (jnp.float32(1.0),), by_hand)


def _slot_array() -> jax.Array:
  return jnp.arange(64, dtype=jnp.int32)


def traced_program(calls: int, slots: int = 64) -> Program:
  def traced(handles, x):
    reads = []
    for k in range(calls // 2):
      token = testing.write_slot(handles[k % slots], x + k)
      reads.append(testing.read_slot(token))
    return jnp.stack(reads)

  def by_hand(handles, x):
    # Any two elements may be one slot: each write after the read before.
    reads: list = []
    for k in range(calls // 2):
      handle = handles[k % slots]
      if reads:
        handle = entangle(handle, reads[-1])
      token = testing.write_slot(handle, x + k)
      reads.append(testing.read_slot(token))
    return jnp.stack(reads)

  return Program("traced", traced, (_slot_array(), jnp.float32(1.0)), by_hand)


def reads_program(calls: int, slots: int = 64) -> Program:
  def reads(handles, x):
    testing.write_slot(handles[0], x)
    return jnp.stack(
      [testing.read_slot(handles[k % slots]) for k in range(1, calls)]
    )

  def by_hand(handles, x):
    # Every element may be the slot written: all read after the write.
    written = testing.write_slot(handles[0], x)
    after = entangle(handles, written)
    return jnp.stack(
      [testing.read_slot(after[k % slots]) for k in range(1, calls)]
    )

  return Program("reads", reads, (_slot_array(), jnp.float32(1.0)), by_hand)


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


def measure(fn: Callable, args: tuple, compile: bool = True) -> dict:
  """Seconds (wall and CPU) to trace and lower, and to compile, `fn`; and
  the entangle calls in its compiled module (without `compile`: to trace
  and lower alone, and the calls in the lowered module)."""

  jax.clear_caches()
  wall, cpu = time.perf_counter(), _cpu()
  lowered = jax.jit(fn).lower(*args)
  wall_lower, cpu_lower = time.perf_counter() - wall, _cpu() - cpu
  if not compile:
    return {
      "wall_lower": wall_lower,
      "wall": wall_lower,
      "cpu": cpu_lower,
      "entangles": lowered.as_text().count(f"@{ENTANGLE_TARGET}"),
    }
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
  calls: int,
  rounds: int,
  log: Callable[[str], None],
  slots: int = 64,
  programs: tuple[str, ...] = ("store", "klujax"),
  compile: bool = True,
) -> dict:
  """Every round of each of `programs` (`slots`: of the store's 64, how
  many the store's programs touch; without `compile`, trace and lower
  only)."""
  chosen: list[Program] = []
  makers = {"store": store_program, "traced": traced_program}
  makers["reads"] = reads_program
  for name in programs:
    if name in makers:
      chosen.append(makers[name](calls, slots))
      continue
    found = klujax_program(calls)
    if found is None:
      log("klujax: skipped, klujax or scipy is not installed")
    else:
      chosen.append(found)
  results: dict = {}
  for program in chosen:
    fns = {PLAIN: program.fn, ORDERED: in_program_order(program.fn)}
    if program.by_hand is not None:
      fns[BY_HAND] = program.by_hand
    runs: dict[str, list[dict]] = {name: [] for name in fns}
    for r in range(rounds):
      for name in round_order(list(fns), r):
        log(f"{program.name} ({calls} calls) round {r + 1}/{rounds}: {name}")
        runs[name].append(measure(fns[name], program.args, compile))
    results[program.name] = runs
  return results


def _ratio(a: list[dict], b: list[dict], key: str) -> str:
  """The median per-round ratio of `key` of `a` over `b`, with its range
  (and, from 2 rounds, a 95% bootstrap interval)."""
  found = stats.ratios([x[key] for x in a], [y[key] for y in b])
  spread = stats.spread(found)
  text = f"{spread.median:.2f}x ({spread.low:.2f}…{spread.high:.2f}"
  if len(found) > 1:
    low, high = stats.bootstrap_ci(found)
    text += f"; {low:.2f}…{high:.2f}"
  return text + ")"


def summary(results: dict, calls: int | None = None) -> list[str]:
  """The Markdown table of `results` (`run`), or of several runs by their
  number of calls (`results` keyed by `calls`, when `calls` is None and
  its keys are ints)."""
  by_calls = (
    results
    if calls is None and results and all(isinstance(k, int) for k in results)
    else {calls: results}
  )
  lines = [
    "| program | native calls | plain, s (median) | in_program_order, s "
    "(median) | by hand, s (median) | ratio to plain, wall: median (range; "
    "95% CI) | ratio to plain, CPU: median (range) | ratio to by hand, wall: "
    "median (range) | ratio to by hand, CPU: median (range) | entangle calls "
    "(by hand) |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for n, found in by_calls.items():
    for name, runs in found.items():
      plain, ordered = runs[PLAIN], runs[ORDERED]
      hand = runs.get(BY_HAND)

      def median(rounds: list[dict]) -> float:
        return stats.spread([r["wall"] for r in rounds]).median

      hand_time = f"{median(hand):.2f}" if hand else "—"
      to_hand = _ratio(ordered, hand, "wall") if hand else "—"
      to_hand_cpu = _ratio(ordered, hand, "cpu") if hand else "—"
      counts = f"{ordered[0]['entangles']}"
      if hand:
        counts += f" ({hand[0]['entangles']})"
      lines.append(
        f"| {name} | {'—' if n is None else n} | {median(plain):.2f} | "
        f"{median(ordered):.2f} | {hand_time} | "
        f"{_ratio(ordered, plain, 'wall')} | {_ratio(ordered, plain, 'cpu')} "
        f"| {to_hand} | {to_hand_cpu} | {counts} |"
      )
  return lines


def _load() -> str:
  return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.program_order_compile",
    description=__doc__.splitlines()[0],
  )
  parser.add_argument(
    "--calls",
    type=int,
    nargs="+",
    default=[1000],
    help="native calls a program; several: a curve, one row each",
  )
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument(
    "--programs",
    nargs="+",
    choices=PROGRAMS,
    default=["store", "klujax"],
  )
  parser.add_argument(
    "--no-compile",
    action="store_true",
    help="trace and lower only: the transform's own share, without XLA "
    "(whose compile of many entangle calls grows faster than the calls)",
  )
  parser.add_argument("--json", type=pathlib.Path)
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error("at least 1 round")
  start = time.monotonic()
  load_start = _load()

  def log(message: str) -> None:
    elapsed = time.monotonic() - start
    print(f"[{elapsed:6.0f} s] {message}", file=sys.stderr, flush=True)

  results = {
    n: run(
      n,
      args.rounds,
      log,
      programs=tuple(args.programs),
      compile=not args.no_compile,
    )
    for n in args.calls
  }
  versions = (
    f"entangle-jax {entangle_jax.__version__}, jax {jax.__version__}, "
    f"jaxlib {jaxlib.__version__}, Python {platform.python_version()}"
  )
  if importlib.util.find_spec("klujax"):
    versions += f", klujax {importlib.metadata.version('klujax')}"
  print(
    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
    f"{platform.machine()}, {os.cpu_count()} cores; {versions}; "
    f"{', '.join(map(str, args.calls))} native calls a program; "
    f"{args.rounds} alternating rounds; "
    f"{'trace + lower' if args.no_compile else 'trace + lower + compile'}; "
    f"load average {load_start} at the "
    f"start, {_load()} at the end; the run took "
    f"{(time.monotonic() - start) / 60:.1f} min."
  )
  print()
  print("\n".join(summary(results)))
  if args.json is not None:
    args.json.write_text(json.dumps(results, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
