"""Compiles and runs the oracle's programs in a process of its own.

Usage: python oracle_worker.py OUT.json RUNS SEED...

Run with ``TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=thunk_executor=6`` (read
only when XLA starts, hence a process of its own) so that XLA:CPU logs the
execution graph of every executor it builds to stderr; each program's
compilation is fenced by ``oracle: begin SEED`` / ``oracle: end SEED``
lines there. Writes, per seed, the optimized module text and the events of
every run.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp

from entangle_jax import testing
from tests.oracle import oracle_programs, oracle_tracing


def mark(text: str) -> None:
  os.write(2, f"oracle: {text}\n".encode())  # unbuffered, between XLA's lines


def events_of_one_run(compiled, base: int) -> list[list[int]]:
  testing.reset_slots()
  oracle_tracing.CALLBACK_EVENTS.clear()
  jax.block_until_ready(compiled(jnp.int32(base)))
  events = [
    [record.slots[0], record.slots[1], record.start, record.end]
    for record in testing.call_log()
    if len(record.slots) == 2  # not the one large write
  ]
  jax.effects_barrier()
  events += [list(e) for e in oracle_tracing.CALLBACK_EVENTS]
  return events


def main(out_path: str, runs: int, seeds: list[int]) -> None:
  results = {}
  for seed in seeds:
    program = oracle_programs.generate(seed)
    lowered = jax.jit(oracle_tracing.function(program)).lower(jnp.int32(0))
    mark(f"begin {seed}")
    compiled = lowered.compile()
    mark(f"end {seed}")
    results[seed] = {
      "module": compiled.as_text(),
      "runs": [
        events_of_one_run(compiled, n % 2**oracle_programs.BASE_BITS)
        for n in range(runs)
      ],
    }
  with open(out_path, "w") as f:
    json.dump(results, f)


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]])
