"""The example store's calls as Python host callbacks, for the io_callback row.

``io_callback`` runs Python, not a native handler, so the row that orders
the calls with ``io_callback(ordered=True)`` needs the store in Python: a
table of float32 slots with the same two calls, the same results and the
same delay (the callback sleeps before it touches the table, as the native
handler does with ``delay_us``). Its wrong reads are then those of the same
hazard on a store that behaves the same, and its races are what
``entangle_jax.testing`` says of host callbacks (they may write anything).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from entangle_jax.testing import NUM_SLOTS

_slots = np.zeros(NUM_SLOTS, np.float32)


def reset() -> None:
  """Sets every slot to 0.0, after pending work."""
  jax.effects_barrier()
  _slots[:] = 0.0


def write_slot(slot, value, *, delay_us: int = 0, ordered: bool):
  """Stores ``value`` into ``slot`` from a host callback; returns the slot
  as the token, as ``entangle_jax.testing.write_slot`` does."""

  def write(slot, value):
    _sleep(delay_us)
    _slots[np.asarray(slot)] = value
    return np.asarray(slot, np.int32)

  slot = jnp.asarray(slot, jnp.int32)
  value = jnp.asarray(value, jnp.float32)
  result = jax.ShapeDtypeStruct(slot.shape, jnp.int32)
  return io_callback(write, result, slot, value, ordered=ordered)


def read_slot(token, *, delay_us: int = 0, ordered: bool):
  """The slot's content, read by a host callback after ``delay_us``."""

  def read(token):
    _sleep(delay_us)
    return _slots[np.asarray(token)].astype(np.float32)

  token = jnp.asarray(token, jnp.int32)
  result = jax.ShapeDtypeStruct(token.shape, jnp.float32)
  return io_callback(read, result, token, ordered=ordered)


def _sleep(delay_us: int) -> None:
  if delay_us:
    time.sleep(delay_us / 1e6)
