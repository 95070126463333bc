"""`Resource`: program order for every call on one native resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from entangle_jax._src import access_marker, arrays
from entangle_jax._src.entangle import entangle


class Resource:
  """Orders the reads and writes of one native resource, as written.

  A native resource (a solver handle, a communicator, a slot store) is named
  inside a JAX program by a *token*: a pytree of arrays that its native calls
  take and return. ``Resource`` threads that token through the calls and adds
  the `entangle` calls that make XLA keep their program order::

    res = Resource(token)
    res.write(native_write, a)  # native_write(token, a) -> new token
    x = res.read(native_read)   # native_read(token) -> x; after the write
    y = res.read(native_read)   # after the write; x, y not ordered
    res.write(native_write, b)  # after both reads
    return x, y, res.token      # res.token: after everything above

  The order it gives:

  * a read runs after every earlier write;
  * a write runs after every earlier read and write;
  * reads between the same two writes are not ordered among themselves, so
    XLA may run them concurrently.

  A ``Resource`` is a Python object that records calls while a function is
  traced (or runs, eagerly): create it inside the function from a token
  argument and return ``res.token``. Under ``scan``, ``while_loop`` and
  ``cond``, make the token the carry and create a ``Resource`` from it in the
  body. Everything it emits is ``entangle`` plus your own calls, so ``vmap``,
  ``grad``, ``shard_map``, sharded ``jit`` and ``jax.export`` treat it as they
  treat those.

  Costs: one ``entangle`` per write that follows reads, taking the outputs of
  all those reads, and none for a write that follows a write. With a token of
  several leaves, one more after each write (see `write`).

  Each call records for `entangle_jax.testing` whether it reads or writes
  which resource (`entangle_jax._src.access_marker`), so that ``races``
  reports only calls that may conflict.
  """

  def __init__(self, token: Any, *, name: str | None = None):
    """Starts tracking the resource named by ``token``.

    Args:
      token: a pytree of arrays (JAX or NumPy arrays, NumPy or Python
        scalars) with at least one leaf. Calls recorded later are ordered
        after whatever produced it, and nothing else.
      name: which native resource this is, for `entangle_jax.testing`:
        calls of ``Resource`` objects with different names do not
        conflict, unless the compiled module proves their tokens one
        handle (two ``Resource`` objects built on one token are one
        object, whatever their names). Give every ``Resource`` of one
        native resource the same name (a ``scan`` body's and the one
        outside it, say). Without a name, it may be any resource that
        nothing tells apart: its writes conflict with every such native
        call, its reads with every such write. The analysis takes the
        first operand of each native call made through it as the one that
        names the object: pass the token first.

    Raises:
      TypeError: a leaf of ``token`` is not an array (the message names
        it), or ``name`` is not a str.
      ValueError: ``token`` has no leaves, or ``name`` is empty.
    """
    _check_token(token, "Resource: token")
    if name is not None and not isinstance(name, str):
      raise TypeError(
        f"Resource: name must be a str or None, not {type(name).__name__}"
      )
    if name == "":
      raise ValueError("Resource: name must not be empty")
    self._name = name
    self._token = token
    self._treedef = jax.tree_util.tree_structure(token)
    self._pending: list[Any] = []  # Outputs of the reads since the last write.
    self._entangled: Any = None  # `token`, once computed for `_pending`.

  @property
  def token(self) -> Any:
    """The current token, ordered after every read and write so far.

    It is the last write's token, entangled with the outputs of the reads
    since that write (one ``entangle`` call; none when no read is pending).
    Return it from the traced function, or pass it to the next code that uses
    the resource. Taking it does not order later reads after earlier ones.
    """
    if not self._pending:
      return self._token
    if self._entangled is None:
      self._entangled = entangle(self._token, *self._pending)
    return self._entangled

  def read(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Calls a native read: returns ``fn(token, *args, **kwargs)``.

    ``fn`` receives the token of the last write, so it runs after every
    earlier write. Its outputs (a pytree of arrays) become witnesses of the
    next write, which therefore runs after this read. Reads between the same
    two writes see the same token and are not ordered among themselves.

    A read's outputs are kept alive by the next write (or by `token`) even if
    you drop them, because the write's ``entangle`` uses them.

    Raises:
      TypeError: ``fn`` is not callable, or a leaf of its result is not an
        array.
      ValueError: ``fn`` returned no array (None, say): nothing could then
        order the next write after this read.
    """
    _check_callable("Resource.read", fn)
    with jax.named_scope(access_marker.scope_component("read", self._name)):
      result = fn(self._token, *args, **kwargs)
    leaves = jax.tree_util.tree_leaves(result)
    if not leaves:
      raise ValueError(
        f"Resource.read: {_name(fn)} returned no array ({result!r}), so "
        "nothing can order the next write after this read. Return what the "
        "native call returned; a call that returns nothing cannot be ordered "
        "before later calls (give it a result, as io_callback's result_shape "
        "does)."
      )
    for index, leaf in enumerate(leaves):
      if not arrays.is_array(leaf):
        raise TypeError(
          f"Resource.read: leaf {index} of {_name(fn)}'s result is not an "
          f"array: got {type(leaf).__name__}"
        )
    self._pending.append(result)
    self._entangled = None
    return result

  def write(
    self,
    fn: Callable[..., Any],
    /,
    *args: Any,
    has_aux: bool = False,
    **kwargs: Any,
  ) -> Any:
    """Calls a native write: ``fn(token, *args, **kwargs)`` returns the token.

    ``fn`` receives `token`: the last write's token entangled, in one
    ``entangle`` call, with the outputs of every read since that write (no
    call when there were none). So the write runs after every earlier read
    and write. Its result becomes the new token and must have the token's
    tree structure.

    With several token leaves, a read that uses only some of them would
    depend only on the native calls that produced those. So after a write
    that changed some leaves (returned objects other than those it was
    given), ``Resource`` entangles all leaves with the changed ones (one
    more ``entangle``): any read then runs after the whole write.

    Args:
      fn: the native write.
      *args: passed to ``fn`` after the token.
      has_aux: ``fn`` returns ``(new_token, aux)``, for a write that also
        produces values (a receive returning data and a token); ``write``
        returns ``aux``. ``aux`` is not a witness of later calls: it is
        ordered as ``fn`` produced it. Reserved: ``fn`` cannot receive a
        keyword argument named ``has_aux`` through ``write``.
      **kwargs: passed to ``fn``.

    Returns:
      ``aux`` when ``has_aux``, else None.

    Raises:
      TypeError: ``fn`` is not callable; ``fn``'s result (its first
        element, with ``has_aux``) does
        not have the token's tree structure, a leaf of it is not an array,
        or with ``has_aux`` ``fn`` did not return a pair.
      ValueError: ``fn`` returned the token it was given, unchanged: nothing
        would order later calls after the write.

    A native write that returns only a status, not the token, is dead code
    to XLA unless it is side-effecting, and returning the given token would
    drop it. Return the token entangled with the status instead:
    ``lambda t, a: entangle(t, native_write(t, a))``.
    """
    _check_callable("Resource.write", fn)
    token = self.token
    with jax.named_scope(access_marker.scope_component("write", self._name)):
      result = fn(token, *args, **kwargs)
    result, aux = _split_aux(result, fn) if has_aux else (result, None)
    treedef = jax.tree_util.tree_structure(result)
    if treedef != self._treedef:
      raise TypeError(
        f"Resource.write: {_name(fn)} must return a token with the token's "
        f"tree structure {self._treedef}, got {treedef}"
      )
    _check_token(result, f"Resource.write: {_name(fn)}'s new token")
    self._token = _tie(token, result, _name(fn))
    self._pending = []
    self._entangled = None
    return aux

  @property
  def name(self) -> str | None:
    """The name given to the constructor, or None for any resource."""
    return self._name

  def __repr__(self) -> str:
    named = "" if self._name is None else f"name={self._name!r}, "
    return (
      f"Resource({named}token={self._treedef}, "
      f"pending_reads={len(self._pending)})"
    )


def _split_aux(result: Any, fn: Callable[..., Any]) -> tuple[Any, Any]:
  """``(new_token, aux)`` from what a ``has_aux`` write returned."""
  if not (isinstance(result, tuple | list) and len(result) == 2):
    size = f" of {len(result)}" if isinstance(result, tuple | list) else ""
    raise TypeError(
      f"Resource.write: with has_aux=True, {_name(fn)} must return a "
      f"pair (new_token, aux), got {type(result).__name__}{size}"
    )
  return result[0], result[1]


def _tie(old: Any, new: Any, fn_name: str) -> Any:
  """``new`` with every leaf ordered after every leaf that the write changed.

  A leaf is changed when it is not the very object ``fn`` was given. One
  ``entangle`` takes every leaf as payload and the changed ones as
  witnesses too; ``entangle`` passes an array that is both only once, as
  payload, so nothing is copied, and every result of the call depends on
  every operand.
  """
  old_leaves = jax.tree_util.tree_leaves(old)
  new_leaves, treedef = jax.tree_util.tree_flatten(new)
  changed = [
    i
    for i, (o, n) in enumerate(zip(old_leaves, new_leaves, strict=True))
    if o is not n
  ]
  if not changed:
    raise ValueError(
      f"Resource.write: {fn_name} returned the token it was given, so "
      "nothing orders later calls after the write (XLA may even drop it as "
      "dead code). Return a token computed by the write, e.g. "
      "entangle(token, status) for a write that returns only a status."
    )
  if len(new_leaves) == 1:
    return new
  tied = entangle(new_leaves, *[new_leaves[i] for i in changed])
  return jax.tree_util.tree_unflatten(treedef, tied)


def _check_token(token: Any, what: str) -> None:
  with_paths = jax.tree_util.tree_leaves_with_path(token)
  if not with_paths:
    raise ValueError(f"{what} has no array leaves: {token!r}")
  for path, leaf in with_paths:
    if not arrays.is_array(leaf):
      raise TypeError(
        f"{what}{jax.tree_util.keystr(path)} is not an array: got "
        f"{type(leaf).__name__}"
      )


def _name(fn: Callable[..., Any]) -> str:
  return getattr(fn, "__name__", repr(fn))


def _check_callable(who: str, fn: object) -> None:
  if not callable(fn):
    raise TypeError(
      f"{who}: fn (the native call) must be callable, not "
      f"{type(fn).__name__} {fn!r}"
    )
