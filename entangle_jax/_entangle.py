"""The public `entangle` function: input checks, pytrees and PRNG keys."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from entangle_jax import _primitive

_SCALAR_TYPES = (bool, int, float, complex, np.generic, np.ndarray)


def entangle(payload: Any, *witnesses: Any) -> Any:
  """Returns ``payload`` unchanged, ordered under ``jit`` after ``witnesses``.

  Under ``jit`` the result is produced by one XLA custom call that XLA cannot
  see into. It takes every payload leaf and every witness leaf as operands and
  returns the payload leaves, each aliased to its operand. Anything that uses
  the result therefore runs after every witness's producer, which is how you
  order native calls that share no ordinary data dependency. At run time the
  call does nothing: the result is bit-identical to the payload.

  Args:
    payload: a pytree of arrays (JAX or NumPy arrays, NumPy or Python
      scalars, typed PRNG key arrays).
    *witnesses: pytrees of arrays that the result must be ordered after.

  Returns:
    ``payload``'s tree with the same shapes, dtypes, weak types and values.
    With no witness leaves, ``payload`` itself is returned and no operation
    is emitted.

  Raises:
    TypeError: a leaf of ``payload`` or of a witness is not an array; the
      message names the leaf's path.

  The custom call is not side-effecting: if its result is unused it may be
  removed, along with the ordering it would have imposed. Use the result,
  typically by rebinding the payload's name (``token = entangle(token, x)``).
  XLA copies the payload buffer if the original payload is still used
  afterwards or cannot be donated; see the README's "Copies" section.
  """
  witness_leaves = []
  for index, witness in enumerate(witnesses):
    witness_leaves += _flatten(witness, f"witnesses[{index}]")[0]
  if not witness_leaves:
    return payload
  physical, originals, treedef = _flatten(payload, "payload")
  results = _primitive.bind(physical, witness_leaves)
  rewrapped = [
    _like(original, result)
    for original, result in zip(originals, results, strict=True)
  ]
  return jax.tree_util.tree_unflatten(treedef, rewrapped)


def _flatten(tree: Any, name: str):
  """`tree`'s leaves as plain arrays (PRNG keys as their key data), its
  leaves as given, and its structure."""
  with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  physical = []
  for path, leaf in with_paths:
    array = _as_array(leaf, name + jax.tree_util.keystr(path))
    if jax.dtypes.issubdtype(array.dtype, jax.dtypes.extended):
      array = jax.random.key_data(array)
    physical.append(array)
  return physical, [leaf for _, leaf in with_paths], treedef


def _as_array(leaf: Any, where: str) -> jax.Array:
  if isinstance(leaf, jax.Array):
    return leaf
  if isinstance(leaf, _SCALAR_TYPES) or hasattr(leaf, "__jax_array__"):
    return jnp.asarray(leaf)
  raise TypeError(
    f"entangle: {where} is not an array: got {type(leaf).__name__} "
    f"{_short_repr(leaf)}. Payload and witness leaves must be arrays or "
    "scalars that jax.numpy.asarray accepts."
  )


def _short_repr(value: Any, limit: int = 60) -> str:
  text = repr(value)
  return text if len(text) <= limit else text[: limit - 3] + "..."


def _like(original: Any, result: jax.Array) -> jax.Array:
  """Rewraps key data as a key array when the original leaf was a key."""
  dtype = getattr(original, "dtype", None)
  if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    return jax.random.wrap_key_data(result, impl=jax.random.key_impl(original))
  return result
