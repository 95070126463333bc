#!/usr/bin/env python3
"""GPU checks of entangle on a CUDA machine; run by tools/gpu_check.sh.

Run as ``python3 -m tools.gpu_check OUT_DIR`` with the repository root on
the path (for ``benchmarks.timing``) after the installed entangle_jax.

1. The hazard (write -> read -> write on one slot of the CUDA store): wrong
   reads without ordering, with optimization_barrier and with entangle.
2. happens_before(read, second_write) on the GPU-compiled module.
3. Command buffers: with custom calls allowed in CUDA graphs, entangle sits
   inside the same command-buffer computation as its neighbours (the module
   is not split at entangle).
4. Cost per call in a 1e4-step scan vs a plain identity.

Writes gpu_check.json and gpu_check.md into the folder given as argument.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

# Custom calls may be recorded into command buffers (CUDA graphs) only when
# asked for; entangle declares itself compatible.
os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "")
  + " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL"
  + " --xla_gpu_graph_min_graph_size=1"
)

import jax
import jax.numpy as jnp

from benchmarks.timing import median_seconds
from entangle_jax import entangle, testing
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax.demo import _hazard
from entangle_jax.testing import _hlo, example_store


def hazard_counts(runs: int) -> dict[str, int]:
  testing.reset_slots()
  return {o.value: _hazard.count_wrong(o, runs) for o in _hazard.Ordering}


def verdicts() -> dict[str, bool]:
  return {
    o.value: _hazard.read_precedes_second_write(o) for o in _hazard.Ordering
  }


def command_buffer() -> dict:
  def fn(x, w):
    y = jnp.sin(x) * 2
    y = entangle(y, w)
    return jnp.cos(y) + 1

  compiled = jax.jit(fn).lower(jnp.ones(1024), jnp.ones(8)).compile()
  module = _hlo.parse(testing.module_text(compiled))
  calls = [
    i
    for instructions in module.computations.values()
    for i in instructions
    if i.target == ENTANGLE_TARGET
  ]
  computations = sorted({i.computation for i in calls})
  in_buffer = bool(calls) and all("command_buffer" in c for c in computations)
  neighbours = [
    [i.opcode for i in module.computations[c] if i.opcode != "parameter"]
    for c in computations
  ]
  return {
    "entangle_calls": len(calls),
    "computations": computations,
    "inside_command_buffer": in_buffer,
    "ops_in_that_computation": neighbours,
    "command_buffer_computations": sum(
      "command_buffer" in c for c in module.computations
    ),
  }


def per_call_cost(steps: int = 10_000, repeats: int = 7) -> dict:
  def scan_with(step_fn):
    def body(carry, _):
      p, w = carry
      return (step_fn(p, w), w + 1), None

    return jax.jit(
      lambda p, w: jax.lax.scan(body, (p, w), None, length=steps)[0]
    )

  def best(fn):
    return median_seconds(fn, (jnp.zeros(()), jnp.zeros(())), repeats)

  plain = best(scan_with(lambda p, w: p))
  entangled = best(scan_with(entangle))
  return {
    "steps": steps,
    "identity_s": plain,
    "entangle_s": entangled,
    "ratio": entangled / plain,
    "per_call_ns": (entangled - plain) / steps * 1e9,
  }


def main(out: pathlib.Path) -> int:
  out.mkdir(parents=True, exist_ok=True)
  devices = jax.devices()
  if devices[0].platform != "gpu":
    print(f"no GPU: JAX sees {devices}", file=sys.stderr)
    return 2
  if example_store.load_cuda() is None:
    print("the CUDA example resource was not built", file=sys.stderr)
    return 2
  results = {
    "jax": jax.__version__,
    "device": str(devices[0].device_kind),
    "hazard_wrong_of_1000": hazard_counts(1000),
    "happens_before_read_second_write": verdicts(),
    "command_buffer": command_buffer(),
    "scan_1e4": per_call_cost(),
  }
  (out / "gpu_check.json").write_text(json.dumps(results, indent=2))
  lines = [f"# GPU check ({results['device']}, jax {results['jax']})", ""]
  lines += ["| ordering | wrong reads / 1000 | read -> second write |"]
  lines += ["|---|---|---|"]
  for o in _hazard.Ordering:
    ordered = results["happens_before_read_second_write"][o.value]
    lines.append(
      f"| {o.value} | {results['hazard_wrong_of_1000'][o.value]} | "
      f"{'ordered' if ordered else 'not ordered'} |"
    )
  cb, scan = results["command_buffer"], results["scan_1e4"]
  lines += [
    "",
    f"entangle inside a command buffer: {cb['inside_command_buffer']} "
    f"({cb['computations']}, {cb['command_buffer_computations']} "
    "command-buffer computations)",
    f"1e4-step scan: {scan['ratio']:.2f}x identity, "
    f"{scan['per_call_ns']:.0f} ns a call",
  ]
  (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
  print("\n".join(lines))
  ok = (
    results["hazard_wrong_of_1000"]["entangle"] == 0
    and results["happens_before_read_second_write"]["entangle"]
  )
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out")))
