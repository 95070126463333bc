#!/usr/bin/env python3
"""GPU checks of entangle on a CUDA machine; run by tools/gpu_check.sh.

Run as ``python3 -m tools.gpu_check OUT_DIR`` with the repository root on
the path (for ``benchmarks.timing``) after the installed entangle_jax.

1. The hazard (write -> read -> write on one slot of the CUDA store): wrong
   reads without ordering, with optimization_barrier and with entangle.
2. happens_before(read, second_write) on the GPU-compiled module.
3. Command buffers: with custom calls allowed in CUDA graphs, entangle is
   recorded into a command buffer with its neighbours (the module is not
   split at entangle). XLA:GPU forms command buffers over thunks, not as
   HLO computations, so this reads XLA's thunk dump of that one module
   (OUT_DIR/xla_dump: ``*.thunk_sequence_after_thunk_passes.txt`` and
   ``*.thunk_metadata.txt``) with tools/thunk_dump.py: a ``kCommandBuffer``
   thunk must hold the thunk that runs the entangle custom call.
4. Cost per call in a 1e4-step scan vs a plain identity.

Writes gpu_check.json and gpu_check.md into the folder given as argument.
Exit status 1 when entangle leaves wrong reads or no order, or when the
thunk dump shows entangle outside every command buffer; a dump that does
not say is reported, not failed.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys

OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out")
PROBE = "command_buffer_probe"
"""The function whose module the command-buffer check reads."""
DUMP = OUT / "xla_dump"
"""Where XLA dumps that module (and no other: --xla_dump_hlo_module_re)."""

# Custom calls may be recorded into command buffers (CUDA graphs) only when
# asked for; entangle declares itself compatible. XLA reads its flags once,
# when the backend starts: set before anything uses jax.
os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "")
  + " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL"
  + " --xla_gpu_graph_min_graph_size=1"
  + f" --xla_dump_to={DUMP} --xla_dump_hlo_as_text"
  + f" --xla_dump_hlo_module_re=.*{PROBE}.*"
)

# Imported after XLA_FLAGS is set, hence E402.
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.timing import median_seconds  # noqa: E402
from entangle_jax import entangle, testing  # noqa: E402
from entangle_jax._src.native import ENTANGLE_TARGET  # noqa: E402
from entangle_jax.demo import _hazard  # noqa: E402
from entangle_jax.testing import example_store  # noqa: E402
from tools import thunk_dump  # noqa: E402


def hazard_counts(runs: int) -> dict[str, int]:
  testing.reset_slots()
  return {o.value: _hazard.count_wrong(o, runs) for o in _hazard.Ordering}


def verdicts() -> dict[str, bool]:
  return {
    o.value: _hazard.read_precedes_second_write(o) for o in _hazard.Ordering
  }


def _one(pattern: str) -> pathlib.Path | None:
  found = sorted(DUMP.glob(pattern))
  return found[-1] if found else None


def command_buffer() -> dict:
  def command_buffer_probe(x, w):
    y = jnp.sin(x) * 2
    y = entangle(y, w)
    return jnp.cos(y) + 1

  compiled = jax.jit(command_buffer_probe).lower(jnp.ones(1024), jnp.ones(8))
  calls = thunk_dump.calls_to(
    testing.module_text(compiled.compile()), ENTANGLE_TARGET
  )
  # XLA writes the sequence after its thunk passes only when they changed
  # it (no command buffer formed: only *.thunk_sequence.txt).
  sequence = _one(f"*{PROBE}*thunk_sequence_after_thunk_passes.txt") or _one(
    f"*{PROBE}*thunk_sequence.txt"
  )
  metadata = _one(f"*{PROBE}*thunk_metadata*.txt")
  placed = (
    thunk_dump.place(
      sequence.read_text(),
      metadata.read_text() if metadata else None,
      calls,
    )
    if sequence
    else None
  )
  return {
    "entangle_calls": calls,
    "thunk_sequence": sequence.name if sequence else None,
    "thunk_metadata": metadata.name if metadata else None,
    "command_buffers": placed.command_buffers if placed else None,
    # True: a kCommandBuffer holds every entangle call; False: the dump
    # shows one outside them; None: the dump does not say.
    "inside_command_buffer": placed.all_inside if placed else None,
    "in_command_buffer": placed.inside if placed else {},
    "outside": placed.outside if placed else [],
    "not_placed": placed.unknown if placed else calls,
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
  shutil.rmtree(DUMP, ignore_errors=True)  # A rerun's dump only.
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
  verdict = {True: "yes", False: "NO", None: "the thunk dump does not say"}
  lines += [
    "",
    "entangle inside a command buffer (XLA's thunk dump): "
    f"{verdict[cb['inside_command_buffer']]} ({cb['entangle_calls']} in "
    f"{cb['in_command_buffer']}, {cb['command_buffers']} command buffers; "
    f"{cb['thunk_sequence']}, {cb['thunk_metadata']})",
    f"1e4-step scan: {scan['ratio']:.2f}x identity, "
    f"{scan['per_call_ns']:.0f} ns a call",
  ]
  (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
  print("\n".join(lines))
  ok = (
    results["hazard_wrong_of_1000"]["entangle"] == 0
    and results["happens_before_read_second_write"]["entangle"]
    and cb["inside_command_buffer"] is not False
  )
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main(OUT))
