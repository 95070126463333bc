"""The "sanitizer" part: what recording costs a native call on CPU.

One no-op FFI handler (entangle's, which decodes nothing) is registered
under two target names: one before the sanitizer starts, so it runs
unwrapped, and one after, so it runs through a recording trampoline. The
same scan calls each target once a step with one int32 operand (a handle
the sanitizer records). Three programs alternate round by round: the
unwrapped target, the wrapped one with recording off, and the wrapped one
inside ``entangle_jax.testing.sanitize`` (recording; each round its own
session, so no per-thread log fills up).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from benchmarks.rounds import alternate
from benchmarks.scan_calls import scan_calls
from benchmarks.timing import call_seconds
from entangle_jax._src import native
from entangle_jax.testing._sanitize import session

STEPS = 10_000
PLAIN = "unsanitized"
OFF = "wrapped, recording off"
RECORDING = "wrapped, recording"
_PLAIN_TARGET = "entangle_jax_bench_plain"
_WRAPPED_TARGET = "entangle_jax_bench_sanitized"


def _scan(target: str):
  return scan_calls(target, STEPS), (jnp.int32(7),)


def measure(args: argparse.Namespace) -> dict:
  """ns a call of each of the three programs, one value a round."""
  handler = native.load().registrations()["entangle"]
  jax.ffi.register_ffi_target(_PLAIN_TARGET, handler, platform="cpu")
  session.start()
  jax.ffi.register_ffi_target(_WRAPPED_TARGET, handler, platform="cpu")
  programs = {
    PLAIN: _scan(_PLAIN_TARGET),
    OFF: _scan(_WRAPPED_TARGET),
    RECORDING: _scan(_WRAPPED_TARGET),
  }
  for fn, fn_args in programs.values():
    jax.block_until_ready(fn(*fn_args))

  def ns_a_call(name: str) -> float:
    fn, fn_args = programs[name]
    if name != RECORDING:
      return min(call_seconds(fn, fn_args, 3)) / STEPS * 1e9
    # The caches cleared on entry, the warm-up call compiles the module in
    # the block, with its calls' places, as a user's block does.
    with session.sanitize() as seen:
      seconds = min(call_seconds(fn, fn_args, 3))
    if len(seen.calls) != 4 * STEPS:  # The warm-up call and three timed.
      raise RuntimeError(f"recorded {len(seen.calls)} of {4 * STEPS} calls")
    return seconds / STEPS * 1e9

  rounds = 10 if args.quick else 30
  return {"sanitizer_ns": alternate(list(programs), rounds, ns_a_call)}
