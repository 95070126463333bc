"""``tp``: a third-party-style JAX binding to a counter library, as its
author would first write it: two side-effecting FFI calls on a handle, and
nothing that orders them (no entangle-jax)."""

import ctypes
import pathlib

import jax
import jax.numpy as jnp

_library = ctypes.CDLL(str(pathlib.Path(__file__).with_name("libcounters.so")))
for _name, _symbol in (
  ("tp_counter_set", "TpCounterSet"),
  ("tp_counter_get", "TpCounterGet"),
):
  jax.ffi.register_ffi_target(
    _name, jax.ffi.pycapsule(getattr(_library, _symbol)), platform="cpu"
  )


def set_counter(handle, value):
  """Stores `value` in the counter `handle`; returns the handle."""
  handle = jnp.asarray(handle, jnp.int32)
  call = jax.ffi.ffi_call(
    "tp_counter_set",
    jax.ShapeDtypeStruct((), jnp.int32),
    has_side_effect=True,
  )
  return call(handle, jnp.asarray(value, jnp.float32))


def get_counter(handle, delay_us=0):
  """The value of the counter `handle`, after `delay_us` microseconds."""
  call = jax.ffi.ffi_call(
    "tp_counter_get",
    jax.ShapeDtypeStruct((), jnp.float32),
    has_side_effect=True,
  )
  return call(jnp.asarray(handle, jnp.int32), delay_us=int(delay_us))
