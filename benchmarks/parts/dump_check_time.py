"""The "dump_check" part: the race check over an XLA dump of many modules
(``python -m entangle_jax.testing DIR``'s work), against the time XLA took
to compile them, as a test suite's run would make them.

The suite is ``modules`` small programs (a third of them without native
calls, the rest with one to eight ``Resource`` write + read pairs, each
program with its own constants so that none is a cache hit), compiled
with the dump switched on, as the check needs it. The check is timed
twice: as the command runs it, in this process
(`entangle_jax.testing._ways_in.module_files.check`: finding the files,
reading the project's declarations, reading and checking every module),
and as a user runs it: ``python -m entangle_jax.testing DUMP`` in a fresh
interpreter, its start and imports included, wall time from start to exit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from unittest import mock

import jax
import jax.numpy as jnp

from benchmarks.cases import DUMP_MODULES, QUICK_DUMP_MODULES
from entangle_jax import Resource
from entangle_jax.testing import read_slot, write_slot
from entangle_jax.testing._ways_in import dump_watch as _dump_watch
from entangle_jax.testing._ways_in import module_files


def suite_program(index: int):
  """The `index`th program of the suite."""
  pairs = index % 8 + 1

  def program(slot, x):
    if index % 3 == 0:  # No native call.
      return slot, jnp.sin(x) * index
    res = Resource(slot)
    reads = []
    for i in range(pairs):
      res.write(write_slot, float(index + i))
      reads.append(res.read(read_slot))
    return res.token, jnp.stack(reads) + x[0]

  return program


def measure(args: argparse.Namespace) -> dict:
  """Seconds XLA compiled the suite for, and seconds the check took."""
  # Before anything compiles: XLA reads its flags at its first compile.
  dump = _dump_watch.request_dump(prefix="bench-dump-")
  modules = QUICK_DUMP_MODULES if args.quick else DUMP_MODULES
  compile_s = 0.0
  for index in range(modules):
    lowered = jax.jit(suite_program(index)).lower(jnp.int32(0), jnp.ones(4))
    start = time.perf_counter()
    lowered.compile()
    compile_s += time.perf_counter() - start
  start = time.perf_counter()
  results = module_files.check([str(dump)])
  check_s = time.perf_counter() - start
  optimized_only_s = _optimized_only_seconds(dump)
  suite = [r for r in results if r.module.startswith("jit_program")]
  if len(suite) != modules:
    raise AssertionError(f"dumped {len(suite)} of the {modules} modules")
  if any(r.races for r in results):
    raise AssertionError("the benchmark suite has races")
  command_s = command_seconds(dump)
  return {
    "dump_check_s": {
      "modules": len(results),
      "native_modules": sum(1 for r in results if r.native_calls),
      "compile": compile_s,
      "check": check_s,
      "optimized_only": optimized_only_s,
      "command": command_s,
    }
  }


def _optimized_only_seconds(dump) -> float:
  """The same check with no module before optimization found beside any
  module: what it cost before it compared the program's order, the
  baseline of the same run (each module then checked as XLA optimized it,
  with the note that says so)."""
  with mock.patch.object(module_files, "_before_optimizations") as before:
    before.return_value = None
    start = time.perf_counter()
    module_files.check([str(dump)])
    return time.perf_counter() - start


def command_seconds(dump) -> float:
  """Wall seconds of ``python -m entangle_jax.testing DUMP`` in a fresh
  interpreter (this one's, with this environment less the dump request),
  run from the dump, which no pyproject.toml is above."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  start = time.perf_counter()
  done = subprocess.run(
    [sys.executable, "-m", "entangle_jax.testing", str(dump)],
    capture_output=True,
    text=True,
    env=env,
    cwd=dump,
  )
  seconds = time.perf_counter() - start
  if done.returncode != 0:
    raise AssertionError(
      f"the command exited {done.returncode}: {done.stdout}{done.stderr}"
    )
  return seconds
