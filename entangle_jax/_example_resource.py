"""A tiny mutable native resource: the stand-in for a real library's state.

The store is a fixed table of float32 slots kept in native memory, which XLA
cannot see: host memory on CPU, device memory on CUDA GPUs (when the package
was built with CUDA), where the calls run on the stream XLA hands them.
``write_slot`` is side-effecting (XLA never drops it); ``read_slot`` is not,
like a solver query that reads library state. Nothing but a data dependency
orders a read against a later write of the same slot, which is the hazard
that `entangle` fixes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from entangle_jax import _native_loader

_native = _native_loader.load_native()

NUM_SLOTS: int = _native.num_slots
"""Number of slots in the store; valid slot ids are ``0 .. NUM_SLOTS - 1``."""


def write_slot(slot: jax.typing.ArrayLike, value: jax.typing.ArrayLike):
  """Stores ``value`` into ``slot`` and returns a token naming the slot.

  Args:
    slot: int32 slot id(s), any shape.
    value: float32 value(s), the same shape as ``slot``; element ``i`` is
      stored into slot ``slot[i]``, in index order.

  Returns:
    An int32 token array equal to ``slot``. Pass it to the next call that
    must see this write (usually through `entangle`).

  Raises:
    An XLA runtime error (``jax.errors.JaxRuntimeError``) when a slot id is
    outside ``[0, NUM_SLOTS)``; nothing is written then.
  """
  slot = jnp.asarray(slot, jnp.int32)
  value = jnp.asarray(value, jnp.float32)
  if slot.shape != value.shape:
    raise ValueError(
      f"write_slot: slot shape {slot.shape} differs from value shape "
      f"{value.shape}"
    )
  call = jax.ffi.ffi_call(
    _native_loader.WRITE_SLOT_TARGET,
    jax.ShapeDtypeStruct(slot.shape, jnp.int32),
    has_side_effect=True,
    vmap_method="broadcast_all",
  )
  return call(slot, value)


def read_slot(token: jax.typing.ArrayLike):
  """Returns the current float32 content of the slot(s) named by ``token``.

  Not side-effecting: if the result is unused XLA may drop the call, and XLA
  may run it at any point after ``token`` is produced, also after a later
  write to the same slot, unless a data dependency orders it.

  Raises:
    An XLA runtime error when a slot id is outside ``[0, NUM_SLOTS)``.
  """
  token = jnp.asarray(token, jnp.int32)
  call = jax.ffi.ffi_call(
    _native_loader.READ_SLOT_TARGET,
    jax.ShapeDtypeStruct(token.shape, jnp.float32),
    vmap_method="broadcast_all",
  )
  return call(token)


def reset_slots() -> None:
  """Sets every slot to 0.0, after pending work has finished.

  Resets the host store and, when the CUDA store was built and a GPU is in
  use, the device store.
  """
  jax.effects_barrier()
  _native.reset_host_slots()
  cuda = _native_loader.load_native_cuda()
  if cuda is not None and has_cuda_device():
    cuda.reset_device_slots()


def has_cuda_device() -> bool:
  """Whether JAX has a CUDA GPU (where the CUDA store is used)."""
  try:
    return bool(jax.devices("cuda"))
  except RuntimeError:  # No CUDA backend in this process.
    return False


def slot_values() -> np.ndarray:
  """A snapshot of every slot, read outside of XLA (for tests and demos)."""
  jax.effects_barrier()
  return np.asarray(read_slot(jnp.arange(NUM_SLOTS, dtype=jnp.int32)))
