"""The same calls with tokens that the caller threads by hand, for
comparison with `tally_jax.Tally`: each call takes the handle returned by
the call before it. Simple and explicit, but every caller must pass on the
newest handle; reusing an older one drops the order (entangle-jax's race
check reports it), and two queries in a row are serialized."""

import jax
import jax.numpy as jnp

from entangle_jax import entangle
from tally_jax import _ffi


def add(
  handle: jax.typing.ArrayLike, amount: jax.typing.ArrayLike
) -> jax.Array:
  """Adds `amount`; returns the handle to pass to the next call."""
  return _ffi.add(handle, amount)


def get(handle: jax.typing.ArrayLike) -> tuple[jax.Array, jax.Array]:
  """The value, and the handle to pass to the next call: ordered after
  this query, so that a later `add` cannot overtake it."""
  handle = jnp.asarray(handle)
  value = _ffi.get(handle)
  return value, entangle(handle, value)
