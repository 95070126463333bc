"""A tiny mutable native resource: the stand-in for a real library's state.

The store is a fixed table of float32 slots kept in native memory, which XLA
cannot see: host memory on CPU, device memory on CUDA GPUs (when the package
was built with CUDA), where the calls run on the stream XLA hands them.
``write_slot`` is side-effecting (XLA never drops it); ``read_slot`` is not,
like a solver query that reads library state. Nothing but a data dependency
orders a read against a later write of the same slot, which is the hazard
that `entangle` fixes.

The host store also records the order in which its calls actually ran
(`call_log`), so that tests can check ordering claims against the runtime.

The store is test code: it lives in extensions of its own, loaded and
registered with XLA when this module is imported (directly, or by the first
use of one of its names through ``entangle_jax.testing``, such as
``entangle_jax.testing.write_slot``), never by ``import entangle_jax`` or
``import entangle_jax.testing`` alone.
"""

from __future__ import annotations

import operator
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from entangle_jax._src import native
from entangle_jax._src.targets.example_store import (
  READ_SLOT_TARGET,
  WRITE_SLOT_TARGET,
)

# Each handler the extensions' `registrations()` tables name, by target.
_TARGETS = {"write_slot": WRITE_SLOT_TARGET, "read_slot": READ_SLOT_TARGET}


def load_cuda() -> types.ModuleType | None:
  """The CUDA store's extension, or None when it was not built."""
  try:
    from entangle_jax.testing import _example_resource_cuda_ffi
  except ImportError:
    return None
  return _example_resource_cuda_ffi


_native = native.load_extension("entangle_jax.testing", "_example_resource_ffi")
native.register_handlers(_native, _TARGETS, ["cpu"])
# read_slot only reads the store: two unordered reads are no race.
_cuda = load_cuda()
if _cuda is not None:
  native.register_handlers(_cuda, _TARGETS, ["CUDA"])

NUM_SLOTS: int = _native.num_slots
"""Number of slots in the store; valid slot ids are ``0 .. NUM_SLOTS - 1``."""


def _slot_ids(slot: jax.typing.ArrayLike, who: str) -> jax.Array:
  """`slot` as int32 ids, rejecting non-integers and, if known, bad ids.

  Concrete ids outside ``[0, NUM_SLOTS)`` raise here, before anything runs.
  Traced ids of an integer type wider than int32 cannot be checked now and
  must not wrap when narrowed: out-of-range ones become a sentinel that the
  native call rejects.
  """
  if isinstance(slot, bool | np.bool_):
    raise TypeError(f"{who}: a slot id must be an integer, not {slot!r}")
  if isinstance(slot, int):
    _check_range(np.asarray([operator.index(slot)], dtype=object), who)
    return jnp.asarray(slot, jnp.int32)
  dtype = np.dtype(getattr(slot, "dtype", None) or np.asarray(slot).dtype)
  if not np.issubdtype(dtype, np.integer):
    raise TypeError(
      f"{who}: slot ids must have an integer dtype, got {dtype} ({slot!r})"
    )
  # A tracer is never concrete (its ``__array__`` always raises). Asked
  # first: the error ``np.asarray`` would raise searches the whole program
  # traced so far for its message, which made tracing n calls quadratic.
  concrete = None if isinstance(slot, Tracer) else np.asarray(slot)
  if concrete is not None:
    _check_range(concrete, who)
    return jnp.asarray(concrete.astype(np.int32))
  slot = jnp.asarray(slot)
  if dtype.itemsize > 4 or (dtype.itemsize == 4 and dtype.kind == "u"):
    in_range = (slot >= 0) & (slot < NUM_SLOTS)
    slot = jnp.where(in_range, slot, _native.unrepresentable_slot)
  return slot.astype(jnp.int32)


def _check_range(ids: np.ndarray, who: str) -> None:
  for item in ids.reshape(-1):
    if not 0 <= int(item) < NUM_SLOTS:
      raise ValueError(
        f"{who}: slot id {int(item)} is outside [0, {NUM_SLOTS}); nothing "
        f"was written"
        if who == "write_slot"
        else f"{who}: slot id {int(item)} is outside [0, {NUM_SLOTS})"
      )


MAX_DELAY_US = 10_000_000
"""The longest ``delay_us`` a call accepts: ten seconds."""


def _delay_attributes(
  delay_us: int | np.integer, who: str
) -> dict[str, np.int64]:
  """The call's FFI attributes for `delay_us`: none for no delay (the
  handlers take a missing ``delay_us`` as zero).

  Raises:
    TypeError: `delay_us` is not an int (a tracer included).
    ValueError: `delay_us` is outside ``[0, MAX_DELAY_US]``.
  """
  if isinstance(delay_us, bool | np.bool_) or not isinstance(
    delay_us, int | np.integer
  ):
    raise TypeError(
      f"{who}: delay_us must be an int (microseconds, known when tracing), "
      f"not {delay_us!r}"
    )
  if not 0 <= delay_us <= MAX_DELAY_US:
    raise ValueError(
      f"{who}: delay_us={delay_us} is outside [0, {MAX_DELAY_US}]"
    )
  return {"delay_us": np.int64(delay_us)} if delay_us else {}


def write_slot(
  slot: jax.typing.ArrayLike,
  value: jax.typing.ArrayLike,
  *,
  delay_us: int | np.integer = 0,
):
  """Stores ``value`` into ``slot`` and returns a token naming the slot.

  Args:
    slot: integer slot id(s), any shape and integer dtype, each in
      ``[0, NUM_SLOTS)``.
    value: float32 value(s), the same shape as ``slot``; element ``i`` is
      stored into slot ``slot[i]``, in index order.
    delay_us: microseconds the call waits before it touches the store (the
      host call sleeps, between its ``start`` and ``end`` in `call_log`; on
      CUDA its stream waits). Calls that nothing orders then overlap in
      time, which makes ordering hazards show. An int (Python or NumPy) in
      ``[0, MAX_DELAY_US]``.

  Returns:
    An int32 token array equal to ``slot``. Pass it to the next call that
    must see this write (usually through `entangle`).

  Raises:
    TypeError: ``slot`` is not of an integer type (floats and bools are
      rejected, never rounded), or ``delay_us`` is not an int.
    ValueError: a concrete slot id is outside ``[0, NUM_SLOTS)``, or
      ``delay_us`` outside ``[0, MAX_DELAY_US]``.
    jax.errors.JaxRuntimeError: at run time, for a traced slot id outside
      the range. In every error case nothing is written.
  """
  attributes = _delay_attributes(delay_us, "write_slot")
  slot = _slot_ids(slot, "write_slot")
  value = jnp.asarray(value, jnp.float32)
  if slot.shape != value.shape:
    raise ValueError(
      f"write_slot: slot shape {slot.shape} differs from value shape "
      f"{value.shape}"
    )
  call = jax.ffi.ffi_call(
    WRITE_SLOT_TARGET,
    jax.ShapeDtypeStruct(slot.shape, jnp.int32),
    has_side_effect=True,
    vmap_method="broadcast_all",
  )
  return call(slot, value, **attributes)


def read_slot(token: jax.typing.ArrayLike, *, delay_us: int | np.integer = 0):
  """Returns the current float32 content of the slot(s) named by ``token``.

  Not side-effecting: if the result is unused XLA may drop the call, and XLA
  may run it at any point after ``token`` is produced, also after a later
  write to the same slot, unless a data dependency orders it. Its target is
  declared a read (built in: `entangle_jax._src.targets.example_store`),
  so ``races``
  does not report two reads.

  ``delay_us``: microseconds the call waits before it reads, as for
  `write_slot`.

  Raises:
    TypeError, ValueError, jax.errors.JaxRuntimeError: a bad slot id or
      ``delay_us``, as for `write_slot`.
  """
  attributes = _delay_attributes(delay_us, "read_slot")
  token = _slot_ids(token, "read_slot")
  call = jax.ffi.ffi_call(
    READ_SLOT_TARGET,
    jax.ShapeDtypeStruct(token.shape, jnp.float32),
    vmap_method="broadcast_all",
  )
  return call(token, **attributes)


def reset_slots() -> None:
  """Sets every slot to 0.0 and clears the call log, after pending work.

  Resets the host store and, when the CUDA store was built and a GPU is in
  use, the device store.
  """
  jax.effects_barrier()
  _native.reset_host_slots()
  _native.clear_call_log()
  if _cuda is not None and has_cuda_device():
    _cuda.reset_device_slots()


def clear_in_callback(token: np.ndarray) -> np.ndarray:
  """A host callback's body that sets every host slot to 0.0 at once, and
  returns `token` as int32 (a value to order later calls after).

  For ``io_callback(clear_in_callback, jax.ShapeDtypeStruct((), jnp.int32),
  token)``: a callback among the store's native calls, whose effect a
  later read shows (0.0 after it, the written value before it). Unlike
  `reset_slots` it neither waits for pending work (which, inside a
  callback, waits for the callback itself) nor clears the call log.
  """
  _native.reset_host_slots()
  return np.asarray(token, np.int32)


def has_cuda_device() -> bool:
  """Whether JAX has a CUDA GPU (where the CUDA store is used)."""
  try:
    return bool(jax.devices("cuda"))
  except RuntimeError:  # No CUDA backend in this process.
    return False


def slot_values() -> np.ndarray:
  """A snapshot of every slot (for tests and demos), after pending work.

  It is one eager `read_slot` of every slot, so `call_log` records it: a
  read of slots ``0 .. NUM_SLOTS - 1``.
  """
  jax.effects_barrier()
  return np.asarray(read_slot(jnp.arange(NUM_SLOTS, dtype=jnp.int32)))


class CallRecord(NamedTuple):
  """One host call of the example resource, as it ran.

  ``start`` and ``end`` come from one counter shared by all calls: ``start``
  when the call began, ``end`` when it had finished. Call ``a`` ran before
  call ``b`` iff ``a.end < b.start``; calls that overlap in time are
  ordered neither way.
  """

  start: int
  end: int
  kind: str
  """``"write"`` or ``"read"``."""
  slots: tuple[int, ...]
  """The slot ids of the call, in index order."""


def call_log() -> list[CallRecord]:
  """The host store's calls since the last `reset_slots`, in order of end.

  Waits for pending work first. Only successful calls are recorded; the CUDA
  store records nothing.

  Raises:
    RuntimeError: more calls than the log holds (65536) since the reset.
  """
  jax.effects_barrier()
  return [
    CallRecord(start, end, "write" if is_write else "read", tuple(slots))
    for start, end, is_write, slots in _native.call_log()
  ]


def next_sequence_number() -> int:
  """Takes a number from the counter that `call_log`'s ``start`` and
  ``end`` come from, so that a test can log events of its own (a host
  callback's, say) in one order with the store's calls."""
  return _native.next_sequence()
