"""Small helpers that the interpreter (`interpreter.Context`) and the
ordering rules of each primitive family (`rules`) share: order values,
abstract values, jaxprs opened, sets of calls as bits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.extend import core as jex_core

from entangle_jax._src import jax_compat, primitive
from entangle_jax._src.entangle import entangle
from entangle_jax._src.program_order.dependence import shape_size
from entangle_jax._src.program_order.touches import Part

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import (
    Dependences,
    SubEvaluation,
  )

SAVED = "entangle_jax_native_result"
"""The name a native call's result is saved by under a rebuilt checkpoint."""


def token_of(values: Sequence[Any], aval, payload=None):
  """A value after all of `values`: the one value itself when it has type
  `aval`, else `payload` (by default zeros of `aval`, or an int32 scalar)
  entangled with them."""
  if aval is not None and len(values) == 1 and aval_of(values[0]) == aval:
    return jax.lax.convert_element_type(values[0], aval.dtype)
  if payload is None:
    shape, dtype = (
      (aval.shape, aval.dtype) if aval is not None else ((), "int32")
    )
    payload = jnp.zeros(shape, dtype)
  return entangle(payload, *values) if values else payload


def entangled(payloads: Sequence[Any], witnesses: Sequence[Any]) -> list:
  """``entangle(tuple(payloads), *witnesses)`` as a list. Where every value
  is a JAX array (a tracer, as the transform's values are) of a NumPy
  dtype, the primitive is bound directly: the public function's checks
  and pytree handling, which such values need none of, cost more than the
  bind, and a long program makes thousands."""
  if not witnesses:
    return list(payloads)
  bound = [_bindable(v) for v in (*payloads, *witnesses)]
  if any(b is None for b in bound):
    return list(entangle(tuple(payloads), *witnesses))
  n = len(payloads)
  return list(primitive.bind(bound[:n], bound[n:]))


def _bindable(value):
  """`value` as the primitive takes it, or None where `entangle` must
  convert or check it: a traced value whose dtype is NumPy's (not a PRNG
  key's, bound as its key data), or a NumPy array of numbers or bools (a
  literal of the traced program), which becomes a constant of the program
  as it would converted, with no copy to a device first. (A concrete JAX
  array, evaluated eagerly, goes through `entangle`, which names arrays
  committed to different devices; so does an eager token.)"""
  if isinstance(value, Tracer):
    if jax_compat.is_token_aval(value.aval):
      return value  # A token witness: the primitive takes it as it is.
    return value if isinstance(value.dtype, np.dtype) else None
  if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in "biufc":
    return np.asarray(value)
  return None


def scalar_after(values: Sequence[Any], payload):
  """A value of `payload`'s type (a scalar order value, or the backward
  chain's float32 cotangent) that comes after all of `values`: a single
  scalar of a real type among them converted to that type, else `payload`
  entangled with them. A conversion is computed after its operand, as an
  entangle's result after its witnesses, and takes no entangle. Only for
  values that only order (their value reaches no result), so that what
  they hold does not matter."""
  if len(values) == 1:
    aval = aval_of(values[0])
    if aval.shape == () and np.dtype(aval.dtype).kind in "biuf":
      return jax.lax.convert_element_type(values[0], aval_of(payload).dtype)
  return entangle(payload, *values) if values else payload


def token_after(exported: Sequence[Any]):
  """An int32 scalar that comes after all of `exported` (the values that
  come after every call a sub-program made): an entangle after them, or a
  zero when there are none."""
  token = jnp.zeros((), jnp.int32)
  return entangle(token, *exported) if exported else token


def deps_of(ctx: Dependences, values: Sequence[Any]) -> int:
  """The calls an entangle after all of `values` comes after (in `ctx`)."""
  bits = 0
  for v in values:
    bits |= ctx.dep(v)
  return bits


def common(deps: Sequence[int]) -> int:
  """The calls in every one of `deps` (none when empty)."""
  if not deps:
    return 0
  bits = deps[0]
  for d in deps[1:]:
    bits &= d
  return bits


def own_parts(ctx: SubEvaluation) -> tuple[Part, ...]:
  """What the calls made in child evaluation `ctx` touch."""
  return tuple(p for a in ctx.own for p in a.parts)


def all_bits(bits: Sequence[int]) -> int:
  total = 0
  for b in bits:
    total |= b
  return total


def aval_of(value) -> jax.ShapeDtypeStruct:
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    dtype = jnp.asarray(value).dtype
  return jax.ShapeDtypeStruct(np.shape(value), dtype)


def placeholder(value):
  aval = aval_of(value)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


def placeholder_x(x):
  aval = aval_of(x)
  return jax.ShapeDtypeStruct(aval.shape[1:], aval.dtype)


def open_jaxpr(closed) -> tuple[Any, Sequence[Any]]:
  if isinstance(closed, jex_core.ClosedJaxpr):
    return closed.jaxpr, closed.consts
  return closed, ()


def is_bool(value) -> bool:
  return jnp.issubdtype(aval_of(value).dtype, jnp.bool_)


def size(value) -> int:
  """How many elements `value` holds: none for a JAX token, which has no
  shape (an entangle on it orders nothing; as a witness it does, see
  `waitable`)."""
  if jax_compat.is_token(value):
    return 0
  return shape_size(np.shape(value))


def waitable(value) -> bool:
  """Whether a later call can be ordered after `value`'s producer by
  entangling with it: a value with elements, or a JAX token (a native call
  that returns only a token), which entangle takes as a witness."""
  return jax_compat.is_token(value) or size(value) > 0
