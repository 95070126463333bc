"""What leaving a `sanitize` block costs, and what memory it keeps.

``python -m benchmarks.sanitizer_exit`` (not part of ``python -m
benchmarks``: a million calls take a while) prints, as JSON:

* ``exit``: for n = 10k, 100k and 1M calls of each call kind (`PROGRAMS`:
  one no-op FFI target on one object, a scan of n steps, the target
  declared a write of operand 0; a write and a read of one object a step,
  n / 2 steps; a ``jax.debug.callback`` a step), the seconds from the
  block's end to ``sanitize`` returning (draining the logs, building the
  records, and the checks), and that per call;
* ``rss``: the process's resident memory (MiB) before the first and after
  each of 5 blocks of 200k calls each;
* ``hazard``: the wide store hazard (32 slots, each a write, a 300 us read
  and a second write that nothing orders after the read), ms a run plain
  and under the sanitizer (records and checks included), and the races
  the sanitizer reported of the wrong reads it saw.

``--quick`` measures 10k and 100k calls and 2 blocks, for a smoke run;
``--kinds`` names the call kinds timed, and ``--exit-only`` times only
the exits.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.scan_calls import scan_calls
from entangle_jax._src import native
from entangle_jax.testing._sanitize import session

_TARGET = "entangle_jax_bench_exit"
_READ = "entangle_jax_bench_exit_read"


def _rss_mib() -> float:
  with open("/proc/self/statm") as f:
    pages = int(f.read().split()[1])
  return pages * resource.getpagesize() / 2**20


def _write_read(steps: int):
  """A scan of `steps` // 2 steps, each a write then a read of one handle,
  the read after the write by data (no race): two places, a call each a
  step, in one execution."""
  write = jax.ffi.ffi_call(
    _TARGET, jax.ShapeDtypeStruct((), jnp.int32), input_output_aliases={0: 0}
  )
  read = jax.ffi.ffi_call(
    _READ, jax.ShapeDtypeStruct((), jnp.int32), input_output_aliases={0: 0}
  )

  def body(handle, _):
    return read(write(handle)), None

  @jax.jit
  def run(handle):
    return jax.lax.scan(body, handle, None, length=steps // 2)[0]

  return run


def _debug_callback(steps: int):
  """A scan of `steps` steps, each a ``jax.debug.callback`` (a host
  callback, recorded in Python)."""

  def note(x):
    del x

  def body(x, _):
    jax.debug.callback(note, x)
    return x + 1, None

  @jax.jit
  def run(x):
    return jax.lax.scan(body, x, None, length=steps)[0]

  return run


PROGRAMS = {
  "one_target": lambda steps: scan_calls(_TARGET, steps),
  "write_read": _write_read,
  "debug_callback": _debug_callback,
}
"""The call kinds timed: one target on one object, a write and a read of
one object in a loop, a host callback in a loop."""


def _exit_seconds(kind: str, steps: int) -> dict:
  run = PROGRAMS[kind](steps)
  # Compiled in the block (only its compiles get the calls' places), and
  # before the time is taken: the exit alone is timed.
  with session.sanitize() as seen:
    jax.block_until_ready(run(jnp.int32(7)))
    left = time.perf_counter()
  seconds = time.perf_counter() - left
  calls = len(seen.calls)
  if calls != steps:
    raise RuntimeError(f"{kind}: recorded {calls} of {steps} calls")
  return {
    "kind": kind,
    "calls": steps,
    "exit_s": round(seconds, 3),
    "us_a_call": round(seconds / steps * 1e6, 3),
    "races": len(seen.races),
    "not_compared": sum(u.calls for u in seen.unpaired) + seen.unknown_runs,
  }


def _hazard(runs: int) -> dict:
  with session.sanitize():
    from entangle_jax.testing import example_store as store

  def program(big):
    reads = []
    for slot in range(32):
      token = store.write_slot(slot, 1.0)
      reads.append(store.read_slot(token, delay_us=300))
      store.write_slot(token, 2.0)  # Nothing orders it after the read.
    return jnp.stack(reads), jnp.sum(jnp.sin(big))

  f = jax.jit(program)
  big = jnp.ones(1000, jnp.float32)
  jax.block_until_ready(f(big))
  start = time.perf_counter()
  for _ in range(runs):
    jax.block_until_ready(f(big))
  plain = (time.perf_counter() - start) / runs
  wrong = 0
  start = time.perf_counter()
  with session.sanitize() as seen:
    g = jax.jit(program)
    for _ in range(runs):
      wrong += int(np.sum(np.asarray(g(big)[0]) != 1.0))
  sanitized = (time.perf_counter() - start) / runs
  return {
    "runs": runs,
    "plain_ms": round(plain * 1e3, 2),
    "sanitized_ms": round(sanitized * 1e3, 2),
    "wrong_reads": wrong,
    "races": len(seen.races),
  }


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--quick", action="store_true")
  parser.add_argument(
    "--kinds", default="", help="comma-separated: " + ", ".join(PROGRAMS)
  )
  parser.add_argument(
    "--exit-only", action="store_true", help="no memory or hazard runs"
  )
  args = parser.parse_args(argv)
  session.start()
  handler = native.load().registrations()["entangle"]
  jax.ffi.register_ffi_target(_TARGET, handler, platform="cpu")
  jax.ffi.register_ffi_target(_READ, handler, platform="cpu")
  from entangle_jax import declare_target

  declare_target(_TARGET, mode="write", object=0)
  declare_target(_READ, mode="read", object=0)
  sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
  kinds = args.kinds.split(",") if args.kinds else list(PROGRAMS)
  out: dict = {"exit": [_exit_seconds(k, n) for k in kinds for n in sizes]}
  if args.exit_only:
    print(json.dumps(out, indent=1))
    return out
  run = scan_calls(_TARGET, 200_000)
  jax.block_until_ready(run(jnp.int32(7)))
  rss = [round(_rss_mib(), 1)]
  for _ in range(2 if args.quick else 5):
    with session.sanitize(clear_caches=False):
      jax.block_until_ready(run(jnp.int32(7)))
    rss.append(round(_rss_mib(), 1))
  out["rss_mib"] = rss
  out["hazard"] = _hazard(5 if args.quick else 20)
  print(json.dumps(out, indent=1))
  return out


if __name__ == "__main__":
  main()
