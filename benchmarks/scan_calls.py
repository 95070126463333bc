"""One FFI target called once a step of a scan, on one int32 handle: the
program of the sanitizer's benchmarks (`benchmarks.parts.sanitizer_time`,
what recording costs a call; `benchmarks.sanitizer_exit`, what leaving a
block costs)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def scan_calls(target: str, steps: int) -> Callable[[jax.Array], jax.Array]:
  """A jitted function of a handle that calls `target` (its operand 0
  aliased to its result) `steps` times, one call a step."""
  call = jax.ffi.ffi_call(
    target,
    jax.ShapeDtypeStruct((), jnp.int32),
    input_output_aliases={0: 0},
  )

  def body(handle, _):
    return call(handle), None

  @jax.jit
  def run(handle):
    return jax.lax.scan(body, handle, None, length=steps)[0]

  return run
