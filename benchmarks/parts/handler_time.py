"""The "handlers" part: this checkout's handler against the peer's.

Runs in this checkout's venv only: it needs this checkout's entangle target
and loads the peer's compiled extension by its path.
"""

from __future__ import annotations

import argparse
import importlib.util

import jax
import jax.numpy as jnp

from benchmarks import programs
from benchmarks.cases import OURS, OURS_AGAIN, PEER, SCAN_STEPS
from benchmarks.rounds import alternate
from benchmarks.timing import call_seconds
from entangle_jax._src.native import ENTANGLE_TARGET

# The target entangle-jax 0.1.1's extension registers when it is loaded.
_PEER_TARGET = "entangle_jax"


def _load_peer_extension(path: str) -> None:
  spec = importlib.util.spec_from_file_location("_ffi", path)
  if spec is None or spec.loader is None:
    raise ImportError(f"cannot load the peer's extension {path}")
  spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _aliased_call(target: str):
  call = jax.ffi.ffi_call(
    target,
    jax.ShapeDtypeStruct((), jnp.float32),
    input_output_aliases={0: 0},
  )
  return lambda payload, witness: call(payload, witness)


def measure(args: argparse.Namespace) -> dict:
  """ns a scan step with each package's handler behind the same call.

  Both handlers are registered in this process (the peer's extension
  registers its target when loaded) and called through `jax.ffi.ffi_call`
  with the same operands, aliasing and API version, so only the handler
  differs. Our handler is timed twice, as two separately compiled programs,
  for an in-process noise floor. Rounds alternate the three programs.
  """
  _load_peer_extension(args.peer_extension)
  targets = {
    OURS: ENTANGLE_TARGET,
    PEER: _PEER_TARGET,
    OURS_AGAIN: ENTANGLE_TARGET,
  }
  scans = {
    name: programs.scan_program(_aliased_call(target), 1, 1)
    for name, target in targets.items()
  }
  for fn, fn_args in scans.values():
    jax.block_until_ready(fn(*fn_args))

  def ns_a_step(name: str) -> float:
    fn, fn_args = scans[name]
    return min(call_seconds(fn, fn_args, 3)) / SCAN_STEPS * 1e9

  return {
    "handler_ns": alternate(list(scans), 10 if args.quick else 30, ns_a_step)
  }
