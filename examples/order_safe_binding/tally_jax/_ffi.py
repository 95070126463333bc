"""The tally library's calls, one `jax.ffi.ffi_call` each, as a binding
author first writes them. Nothing here orders one call after another:
`tally_jax.Tally` does that.

Every call is marked ``has_side_effect=True``. XLA treats a call that is
not as a pure function of its operands: it merges two ``create(0.0)`` into
one (both users get the same handle), and deletes an ``add`` or a
``destroy`` whose result nobody uses. Side-effecting calls are neither
merged nor deleted; they may still be reordered, which is what
`entangle_jax.Resource` (in `tally_jax.Tally`) is for.

``vmap_method="broadcast_all"``: under `jax.vmap` each call receives the
whole batch, every operand broadcast to it, and the handlers work element
by element (native/tally_ffi.cc). Without a ``vmap_method``, ``vmap`` of
an FFI call raises ``NotImplementedError``.
"""

import ctypes
import pathlib

import jax
import jax.numpy as jnp

_TARGETS = {
  "tally_create": "TallyCreate",
  "tally_add": "TallyAdd",
  "tally_get": "TallyGet",
  "tally_destroy": "TallyDestroy",
}


def _load() -> ctypes.CDLL:
  """The native library, next to this file (libtally.so, as both builds
  name it), its handlers registered with XLA for the CPU."""
  library = ctypes.CDLL(str(pathlib.Path(__file__).with_name("libtally.so")))
  for target, symbol in _TARGETS.items():
    jax.ffi.register_ffi_target(
      target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu"
    )
  library.tally_set_query_delay_us.argtypes = [ctypes.c_int64]
  library.tally_live_count.restype = ctypes.c_int64
  return library


_library = _load()


def _handles(handle: jax.typing.ArrayLike) -> jax.Array:
  handle = jnp.asarray(handle)
  if handle.dtype != jnp.int32:
    raise TypeError(f"tally: handles are int32 arrays, not {handle.dtype}")
  return handle


def _call(target: str, dtype, shape: tuple[int, ...]):
  return jax.ffi.ffi_call(
    target,
    jax.ShapeDtypeStruct(shape, dtype),
    has_side_effect=True,
    vmap_method="broadcast_all",
  )


def create(initial: jax.typing.ArrayLike = 0.0) -> jax.Array:
  """New accumulators holding `initial` (one per element); their handles."""
  initial = jnp.asarray(initial, jnp.float32)
  return _call("tally_create", jnp.int32, initial.shape)(initial)


def add(
  handle: jax.typing.ArrayLike, amount: jax.typing.ArrayLike
) -> jax.Array:
  """Adds `amount` to the accumulator `handle`; returns the handle."""
  handle = _handles(handle)
  # The accumulator's state is outside differentiation: no tangent flows
  # into the native call (it has no derivative rule).
  amount = jax.lax.stop_gradient(jnp.asarray(amount, jnp.float32))
  amount = jnp.broadcast_to(amount, handle.shape)
  return _call("tally_add", jnp.int32, handle.shape)(handle, amount)


def get(handle: jax.typing.ArrayLike) -> jax.Array:
  """The value of the accumulator `handle`."""
  handle = _handles(handle)
  return _call("tally_get", jnp.float32, handle.shape)(handle)


def destroy(handle: jax.typing.ArrayLike) -> jax.Array:
  """Frees the accumulator `handle`; returns the handle (now dangling)."""
  handle = _handles(handle)
  return _call("tally_destroy", jnp.int32, handle.shape)(handle)


def set_query_delay(seconds: float) -> None:
  """Makes every `get` wait `seconds` before it reads (for tests)."""
  if not seconds >= 0:
    raise ValueError(f"tally: the delay must be >= 0 seconds, not {seconds}")
  _library.tally_set_query_delay_us(round(seconds * 1e6))


def live_count() -> int:
  """How many accumulators exist now (created and not destroyed)."""
  return int(_library.tally_live_count())
