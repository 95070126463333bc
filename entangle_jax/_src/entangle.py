"""The public `entangle` function: input checks, pytrees and PRNG keys."""

from __future__ import annotations

from typing import Any, TypeVar

import jax
from jax.core import Tracer

from entangle_jax._src import arrays, jax_compat, primitive

T = TypeVar("T")


def entangle(payload: T, *witnesses: Any) -> T:
  """Returns ``payload`` unchanged, ordered under ``jit`` after ``witnesses``.

  Under ``jit`` the result is produced by one XLA custom call that XLA cannot
  see into. It takes every payload leaf and every witness leaf as operands and
  returns the payload leaves, each aliased to its operand. (A payload of more
  than 128 leaves takes one such call per 128 leaves, each with every
  witness: one call aliasing thousands of leaves compiles very slowly.)
  Anything that uses the result therefore runs after every witness's
  producer, which is how you order native calls that share no ordinary data
  dependency. At run time the call does nothing: the result is bit-identical
  to the payload.

  Args:
    payload: a pytree of arrays (JAX or NumPy arrays, NumPy or Python
      scalars, typed PRNG key arrays).
    *witnesses: pytrees of arrays that the result must be ordered after.
      A leaf may also be a JAX token (``jax.lax.create_token()``'s type,
      or what a native call that returns only a token returns): it is an
      operand of the custom call as it is, a ``!stablehlo.token``, so the
      result comes after the token's producer. A token gets no tangent
      and holds no value; it orders only.

  Returns:
    ``payload``'s tree with the same shapes, dtypes, weak types and values;
    its leaves are JAX arrays (a NumPy or Python scalar leaf comes back as
    the JAX array it converts to, which is why the annotation ``T`` is exact
    for trees of JAX arrays). With no witnesses, ``payload`` itself is
    returned and no operation is emitted; witnesses none of which has an
    array or token leaf raise (one with none beside one with arrays is
    passed by).

  Raises:
    TypeError: ``payload`` or a witness has no array leaves (``None``,
      ``{}``, an object registered as a pytree with none, such as a handle
      wrapper whose handle is not a leaf): nothing could carry the order, so the
      message names its type and asks for the array that holds the
      handle, or what the earlier call returned. (For the witnesses: when
      none of them has an array or token leaf.)
      Or a leaf of ``payload`` or of a witness is not an array of a
      dtype JAX supports (a string, object or datetime array, a Python int
      too large for its dtype, a NumPy masked array, ...); the message names
      the leaf's path. Or a leaf of ``payload`` is a JAX token, which
      has no value to hand back; the message names the leaf.
    ValueError: called outside ``jit`` on arrays committed to different
      devices; the message names the leaves and their devices.

  A zero-size leaf (an array with no elements) orders nothing: it holds no
  bytes, so XLA usually replaces it with an empty constant, and no runtime
  waits on an empty buffer. If every witness leaf is zero-size, nothing is
  ordered; if a payload leaf is, neither is its result. Witness a value with
  at least one element, such as the read's result itself.

  The custom call is not side-effecting: if its result is unused it may be
  removed, along with the ordering it would have imposed. Use the result,
  typically by rebinding the payload's name (``token = entangle(token, x)``).
  XLA copies the payload buffer if the original payload is still used
  afterwards or cannot be donated; see docs/copies.md.

  On TPU the call is a Pallas kernel that does nothing (a Mosaic custom
  call, opaque to XLA:TPU); scalar payloads go in padded and other dtypes
  as the same bits. A zero-size array, a 2-bit integer, float64 or
  complex128, and a call with a JAX token witness (a Pallas kernel takes
  no token), lower to ``optimization_barrier`` instead, which XLA:TPU
  removes, so it does not order host callbacks there (docs/platforms.md,
  "TPU").
  """
  witness_leaves, witness_names = [], []
  for index, witness in enumerate(witnesses):
    leaves, _, _, names = _flatten(witness, f"witnesses[{index}]", tokens=True)
    witness_leaves += leaves
    witness_names += names
  if witnesses and not witness_leaves:
    given = ", ".join(
      f"{type(w).__qualname__} {_short_repr(w)}" for w in witnesses
    )
    raise TypeError(
      f"entangle: the witnesses ({given}) have no array leaves, so the "
      "result could not wait for them: entangle would order nothing. Pass "
      "what the earlier call returned (an array, or a JAX token), not a "
      "value with no arrays (None, {}, or an object registered as a pytree "
      "with none)."
    )
  # Checked even when there is nothing to order, so that whether a bad leaf
  # raises does not depend on the witnesses.
  physical, originals, treedef, names = _flatten(payload, "payload")
  if not physical:
    raise TypeError(
      f"entangle: the payload, {type(payload).__qualname__} "
      f"{_short_repr(payload)}, has no array leaves, so nothing can carry "
      "the order: entangle would return it unchanged and order nothing. "
      "Entangle the array that holds the handle or token (an object that "
      "wraps a handle often takes the array in its place), and pass the "
      "result on."
    )
  if not witness_leaves:
    return payload
  _check_devices(physical + witness_leaves, names + witness_names)
  results = primitive.bind(physical, witness_leaves)
  rewrapped = [
    _like(original, result)
    for original, result in zip(originals, results, strict=True)
  ]
  return jax.tree_util.tree_unflatten(treedef, rewrapped)


def _flatten(tree: Any, name: str, tokens: bool = False):
  """`tree`'s leaves as plain arrays (PRNG keys as their key data), its
  leaves as given, its structure, and each leaf's path for messages.
  With `tokens` (a witness), a JAX token leaf is kept as it is; otherwise
  (the payload) it raises, naming the leaf."""
  with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  physical, names = [], []
  for path, leaf in with_paths:
    where = name + jax.tree_util.keystr(path)
    if jax_compat.is_token(leaf):
      if not tokens:
        raise TypeError(
          f"entangle: {where} is a JAX token, which cannot be a payload: "
          "it holds no value to hand back. Entangle an array after the "
          "token instead (entangle(x, token)), and pass that array on."
        )
      # A token has no dtype: it becomes an operand of the custom call as
      # it is (a !stablehlo.token), which XLA orders after its producer.
      physical.append(leaf)
      names.append(where)
      continue
    array = _as_array(leaf, where)
    if jax.dtypes.issubdtype(array.dtype, jax.dtypes.extended):
      array = jax.random.key_data(array)
    physical.append(array)
    names.append(where)
  return physical, [leaf for _, leaf in with_paths], treedef, names


def _as_array(leaf: Any, where: str) -> jax.Array:
  # JAX's own messages name neither entangle nor the leaf.
  try:
    return arrays.as_array(leaf)
  except arrays.NotAnArrayError as error:
    raise _not_an_array(leaf, where, error.reason) from error.__cause__


def _not_an_array(leaf: Any, where: str, why: str) -> TypeError:
  dtype = getattr(leaf, "dtype", None)
  kind = type(leaf).__name__ + (f" of dtype {dtype}" if dtype else "")
  return TypeError(
    f"entangle: {where} is not an array JAX supports: got {kind} "
    f"{_short_repr(leaf)}{why}. Payload and witness leaves must be arrays "
    "or scalars that jax.numpy.asarray accepts."
  )


def _check_devices(arrays: list[jax.Array], names: list[str]) -> None:
  """Outside ``jit``, names the leaves when committed arrays live on
  different devices (JAX's own error would name an internal function)."""
  first = None
  for array, where in zip(arrays, names, strict=True):
    # Tracers are jax.Array instances too, but have no devices of their own;
    # a float0 leaf (the tangent of an integer) converts to a NumPy array.
    if (
      not isinstance(array, jax.Array)
      or isinstance(array, Tracer)
      or not array.committed
    ):
      continue
    devices = sorted(array.devices(), key=lambda device: device.id)
    if first is None:
      first = (where, devices)
    elif devices != first[1]:
      raise ValueError(
        f"entangle: {first[0]} is committed to {_device_names(first[1])} "
        f"but {where} to {_device_names(devices)}. Outside jit, entangle "
        "runs one computation, which needs every committed leaf on the same "
        "devices: move them there with jax.device_put first."
      )


def _device_names(devices: list[Any]) -> str:
  return "[" + ", ".join(str(device) for device in devices) + "]"


def _short_repr(value: Any, limit: int = 60) -> str:
  text = " ".join(repr(value).split())  # One line, even for NumPy arrays.
  return text if len(text) <= limit else text[: limit - 3] + "..."


def _like(original: Any, result: jax.Array) -> jax.Array:
  """Rewraps key data as a key array when the original leaf was a key."""
  dtype = getattr(original, "dtype", None)
  if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    return jax.random.wrap_key_data(result, impl=jax.random.key_impl(original))
  return result
