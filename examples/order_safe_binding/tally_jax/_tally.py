"""`Tally`: the tally library's ordered API. Callers get program order
without thinking about it: every call goes through one
`entangle_jax.Resource` per accumulator (or per batch of them)."""

from __future__ import annotations

import itertools

import jax

from entangle_jax import Resource
from tally_jax import _ffi

_names = itertools.count()


class Tally:
  """An accumulator (or an array of them) of the tally library, whose calls
  run in the order they are written, under `jax.jit` or not.

  ::

    @jax.jit
    def step(handle, x):
      t = Tally(handle)
      t.add(x)
      before = t.get()   # after the add
      t.add(1.0)         # after the get
      return before, t.handle

  Inside a jitted function, make a ``Tally`` from a handle argument (or
  with `Tally.create`) and return `handle`: the next jitted call that takes
  it runs after this one's calls. A batch of handles is one ``Tally``
  (its calls work element by element), under `jax.vmap` too.

  Each ``Tally`` is its own `Resource`, named ``tally N`` (or `name`), so
  entangle-jax's race check tells different accumulators apart; two
  ``Tally`` objects on one handle value are still one accumulator to it.
  """

  def __init__(self, handle: jax.typing.ArrayLike, *, name: str | None = None):
    """Takes over ordering the calls on `handle` (int32, any shape).

    Raises:
      TypeError: `handle` is not an int32 array.
    """
    self._resource = Resource(
      _ffi._handles(handle), name=name or f"tally {next(_names)}"
    )
    self._destroyed = False

  @classmethod
  def create(
    cls, initial: jax.typing.ArrayLike = 0.0, *, name: str | None = None
  ) -> Tally:
    """New accumulators holding `initial` (one per element)."""
    return cls(_ffi.create(initial), name=name)

  def add(self, amount: jax.typing.ArrayLike) -> None:
    """Adds `amount` (broadcast to the handles' shape), after every earlier
    call on this tally. No gradient flows into the accumulator."""
    self._live("add")
    self._resource.write(_ffi.add, amount)

  def get(self) -> jax.Array:
    """The value, after every earlier `add`; later adds wait for it."""
    self._live("get")
    return self._resource.read(_ffi.get)

  def destroy(self) -> None:
    """Frees the accumulator after every earlier call on it. Any later
    call on this ``Tally`` raises; `handle` stays the (dangling) token."""
    self._live("destroy")
    self._resource.write(_ffi.destroy)
    self._destroyed = True

  @property
  def handle(self) -> jax.Array:
    """The handle, as a token ordered after every call so far: return it
    from a jitted function, or hand it to the next one."""
    return self._resource.token

  def _live(self, call: str) -> None:
    if self._destroyed:
      raise RuntimeError(f"tally: {call} after destroy ({self._resource!r})")
