"""One benchmark subprocess: measures one part of one implementation.

Run by the runner (``python -m benchmarks``), never by hand, as
``python -m benchmarks.worker`` with the Python of the venv that holds the
implementation: entangle-jax 0.1.1 imports as ``entangle_jax`` too, so it
lives in a venv of its own. Prints one line of JSON. ``--part`` picks what
to measure:

* ``timing``: per-call cost in a scan and ``jit(vmap)`` programs;
* ``compile``: trace + lower + compile time against the number of leaves;
* ``structure``: counts of custom calls, collectives and copies in the
  compiled HLO, and the custom-call instruction itself;
* ``handlers``: this checkout's handler against the peer's compiled
  handler, in one process, behind identical custom calls;
* ``analysis``: the order analysis of a compiled module of thousands of
  native calls, against XLA's compile time of that module;
* ``program_order``: the hazard scan under ``in_program_order`` against
  the same scan written with ``Resource``, in one process.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import platform
import sys
import warnings

import jax
import jaxlib

from benchmarks.cases import OURS, PEER

# Each part's module (in benchmarks.parts), imported only when its part
# runs: the peer's venv cannot import the handler part, and the structure
# part must find 8 host devices configured before JAX starts its backend.
PARTS = {
  "timing": "call_time",
  "compile": "compile_time",
  "structure": "hlo_structure",
  "handlers": "handler_time",
  "analysis": "analysis_time",
  "dump_check": "dump_check_time",
  "program_order": "program_order_time",
  "sanitizer": "sanitizer_time",
}
_CPU_DEVICES = {"structure": 8}


def versions(impl: str) -> dict:
  """Versions of what this subprocess runs."""
  found = {
    "python": platform.python_version(),
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
  }
  if impl in (OURS, PEER):
    found["entangle-jax"] = importlib.metadata.version("entangle-jax")
  return found


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.worker", description=__doc__.splitlines()[0]
  )
  parser.add_argument("--impl", required=True)
  parser.add_argument("--part", required=True, choices=tuple(PARTS))
  parser.add_argument("--quick", action="store_true")
  parser.add_argument(
    "--native", help="example resource extension to load (peer venv only)"
  )
  parser.add_argument("--peer-extension", help="the peer's compiled _ffi")
  args = parser.parse_args(argv)
  # Donation an implementation cannot use is part of what is measured.
  warnings.filterwarnings("ignore", message=".*donated buffers.*")
  if args.part in _CPU_DEVICES:
    jax.config.update("jax_num_cpu_devices", _CPU_DEVICES[args.part])
  part = importlib.import_module(f"benchmarks.parts.{PARTS[args.part]}")
  result = part.measure(args)
  result["versions"] = versions(args.impl)
  print(json.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
