"""The programs the benchmark runs, around any implementation's entangle.

Every implementation runs the same programs; only ``entangle`` differs.
Imported in the worker subprocesses only, in this checkout's venv and in
the peer's (where ``entangle_jax`` is entangle-jax 0.1.1).
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp

from benchmarks.cases import BARRIER, BASELINE, NOISE, OURS, PEER, SCAN_STEPS

# In each venv, entangle_jax is that venv's implementation: this checkout's
# or entangle-jax 0.1.1.
from entangle_jax import entangle

# The example resource's FFI targets, as entangle_jax.testing registers them.
_WRITE_TARGET = "entangle_jax_write_slot"
_READ_TARGET = "entangle_jax_read_slot"


def entangle_fn(impl: str):
  """``impl``'s ``entangle(payload, *witnesses)``."""
  if impl in (OURS, PEER):
    return entangle
  if impl == BARRIER:
    return lambda payload, *w: jax.lax.optimization_barrier((payload, w))[0]
  if impl in (BASELINE, NOISE):
    return lambda payload, *w: payload
  raise ValueError(f"unknown implementation {impl!r}")


def example_resource(native_path: str | None):
  """``(write_slot, read_slot, num_slots)`` of this checkout's resource.

  In this checkout's venv they come from ``entangle_jax.testing``. The
  peer's venv has its own ``entangle_jax``, so there the same compiled
  extension is loaded from ``native_path`` and its handlers are called with
  the same targets and attributes as ``entangle_jax.testing`` uses, so that
  every implementation runs the same program around its ``entangle``.
  """
  if native_path is None:
    # Only this checkout's venv has entangle_jax.testing.
    from entangle_jax.testing import NUM_SLOTS, read_slot, write_slot

    return write_slot, read_slot, NUM_SLOTS
  native = _load_extension(native_path)
  handlers = native.registrations()
  jax.ffi.register_ffi_target(
    _WRITE_TARGET, handlers["write_slot"], platform="cpu"
  )
  jax.ffi.register_ffi_target(
    _READ_TARGET, handlers["read_slot"], platform="cpu"
  )

  def write_slot(slot, value):
    call = jax.ffi.ffi_call(
      _WRITE_TARGET,
      jax.ShapeDtypeStruct(jnp.shape(slot), jnp.int32),
      has_side_effect=True,
      vmap_method="broadcast_all",
    )
    return call(jnp.asarray(slot, jnp.int32), jnp.asarray(value, jnp.float32))

  def read_slot(token):
    call = jax.ffi.ffi_call(
      _READ_TARGET,
      jax.ShapeDtypeStruct(jnp.shape(token), jnp.float32),
      vmap_method="broadcast_all",
    )
    return call(jnp.asarray(token, jnp.int32))

  return write_slot, read_slot, native.num_slots


def _load_extension(path: str):
  """The compiled extension module at ``path``, loaded by its file."""
  spec = importlib.util.spec_from_file_location("_example_resource_ffi", path)
  if spec is None or spec.loader is None:
    raise ImportError(f"cannot load the example resource from {path}")
  native = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(native)
  return native


def scan_program(entangle, leaves: int, witnesses: int):
  """A jitted scan whose step entangles ``leaves`` with ``witnesses``.

  Returns ``(fn, args)``. Witnesses change every step, so no call can be
  hoisted out of the loop.
  """

  def body(carry, _):
    payload, wits = carry
    payload = entangle(payload, *wits)
    return (payload, tuple(w + 1 for w in wits)), None

  @jax.jit
  def run(payload, wits):
    return jax.lax.scan(body, (payload, wits), None, length=SCAN_STEPS)[0]

  payload = tuple(jnp.zeros(()) for _ in range(leaves))
  payload = payload[0] if leaves == 1 else payload
  wits = tuple(jnp.zeros(()) for _ in range(witnesses))
  return run, (payload, wits)


def resource_program(entangle, resource, batch: int):
  """``jit(vmap)`` of: native write, native read, entangle, native write.

  The payload is the token the first write returns, an intermediate value,
  so XLA may alias it in place: no copy is timed.
  """
  write_slot, read_slot, num_slots = resource

  def step(slot, value):
    token = write_slot(slot, value)
    x = read_slot(token)
    token = entangle(token, x)  # the second write waits for the read
    return write_slot(token, x + 1.0), x

  slots = jnp.arange(batch, dtype=jnp.int32) % num_slots
  return jax.jit(jax.vmap(step)), (slots, jnp.ones(batch, jnp.float32))


def donated_program(entangle, batch: int):
  """``jit(vmap(entangle))`` with the payload donated.

  Returns ``(fn, payload, witness)``. Chain the calls
  (`timing.chained_seconds`): each call consumes the previous call's
  payload, so XLA may write the result in place.
  """
  batched = jax.jit(jax.vmap(lambda p, w: entangle(p, w)), donate_argnums=0)
  payload = jnp.ones((batch, 4), jnp.float32)
  return batched, payload, jnp.ones((batch, 2), jnp.float32)
