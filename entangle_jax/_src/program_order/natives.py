"""Which equations are native calls `in_program_order` orders, what they
declare, and which sub-programs (or custom differentiation rules) make
such calls."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from entangle_jax._src import jax_compat
from entangle_jax._src.program_order.objects import Obj, Part
from entangle_jax._src.targets import names
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax._src.targets.library_kernels import is_library_target

_HOST_CALLBACKS = ("io_callback", "debug_callback", "pure_callback")


def side_effecting(eqn) -> bool:
  name = eqn.primitive.name
  if name == "ffi_call":
    return bool(eqn.params.get("has_side_effect", False))
  return name != "pure_callback"


def _target_name(eqn) -> str | None:
  params = eqn.params
  for key in ("target_name", "call_target_name"):
    if key in params:
      return str(params[key])
  return None


def native_call(eqn, decls: Declarations):
  """``(target, parts, object operand, returns_object)`` for a native call
  that in_program_order orders, else None."""
  name = eqn.primitive.name
  if name == "ffi_call":
    target = _target_name(eqn)
    if target is None or is_library_target(target):
      return None
    if target == names.ENTANGLE_TARGET:
      return None
    declared = decls.for_target(target)
  elif name in _HOST_CALLBACKS:
    target = name
    declared = decls.for_target(names.HOST_CALLBACK_PREFIXES[1] + "callback")
  else:
    return None
  if declared is None:
    return target, (Part("write", None, target),), None, ()
  if declared.mode == "none":
    return None
  mode = declared.mode
  object_index = declared.object
  if object_index is not None and object_index >= len(eqn.invars):
    object_index = None
  obj_marker = None if object_index is None else Obj()
  part = Part(mode, obj_marker, target)
  return target, (part,), object_index, tuple(declared.returns_object)


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, tuple | list) else (value,):
      if isinstance(item, jex_core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jex_core.Jaxpr):
        yield item


def all_eqns(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn
    for sub in _sub_jaxprs(eqn):
      yield from all_eqns(sub)


def has_native_jaxpr(jaxpr, decls, rules: bool = True) -> bool:
  """Whether `jaxpr` makes a native call, in a sub-jaxpr or (with `rules`)
  a custom differentiation rule included."""
  return any(
    native_call(e, decls) is not None
    or (rules and _custom_rules_native(e, decls))
    for e in all_eqns(jaxpr)
  )


def has_native(eqn, decls) -> bool:
  if any(has_native_jaxpr(j, decls) for j in _sub_jaxprs(eqn)):
    return True
  return _custom_rules_native(eqn, decls)


_RULES_CACHE: dict[int, tuple[Any, Declarations, Any]] = {}
_BACKWARD_CACHE: dict[int, tuple[Any, Declarations, Any]] = {}


def _once(cache: dict, compute, eqn, decls):
  """``compute(eqn, decls)``, once per equation and declarations (loop
  bodies are traced more than once)."""
  found = cache.get(id(eqn))
  if found is not None and found[0] is eqn and found[1] == decls:
    return found[2]
  if len(cache) > 1024:
    cache.clear()
  result = compute(eqn, decls)
  cache[id(eqn)] = (eqn, decls, result)
  return result


def _custom_rules_native(eqn, decls) -> bool:
  """`_rules_have_native` for a custom_jvp or custom_vjp call, once per
  equation; False for others."""
  if eqn.primitive.name not in ("custom_jvp_call", "custom_vjp_call"):
    return False
  return _once(_RULES_CACHE, _rules_have_native, eqn, decls)


def _rules_have_native(eqn, decls) -> bool:
  """Whether the differentiation rules of a custom_jvp or custom_vjp call
  (its JVP, its forward or backward pass) make a native call: traced as
  ``jax.jvp`` and ``jax.vjp`` of the call would run them."""
  avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
  floats = [jnp.issubdtype(a.dtype, jnp.inexact) for a in avals]

  def call(*args):
    return jax_compat.bind_equation(eqn, args)

  def differentiated(*args):
    def on_floats(*xs):
      it = iter(xs)
      full = [next(it) if f else a for a, f in zip(args, floats, strict=True)]
      return call(*full)

    xs = [a for a, f in zip(args, floats, strict=True) if f]
    outs, tangents = jax.jvp(on_floats, xs, [jnp.ones_like(x) for x in xs])
    outs, pullback = jax.vjp(on_floats, *xs)
    return tangents, pullback([_ones_cotangent(o) for o in outs])

  try:
    traced = jax.make_jaxpr(differentiated)(*avals)
  except Exception:  # Cannot tell: rebuild it, which orders whatever runs.
    return True
  # First-order: the rules of custom calls that the rules make are not run
  # by this differentiation (and a rule that calls its own function would
  # otherwise be traced without end).
  return has_native_jaxpr(traced.jaxpr, decls, rules=False)


def backward_parts(eqn, decls: Declarations) -> tuple[Part, ...]:
  """What the native calls of a custom_vjp call's backward pass touch
  (objects unknown; traced as ``jax.vjp`` of the call would run it, once
  per equation); () for a custom_vjp whose backward pass makes none, and
  for any other equation."""
  if eqn.primitive.name != "custom_vjp_call":
    return ()
  return _once(_BACKWARD_CACHE, _backward_parts, eqn, decls)


def _backward_parts(eqn, decls) -> tuple[Part, ...]:
  avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
  holder = {}

  def forward(*args):
    outs, pullback = jax.vjp(lambda *a: jax_compat.bind_equation(eqn, a), *args)
    leaves, holder["treedef"] = jax.tree_util.tree_flatten(pullback)
    holder["outs"] = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs]
    return leaves

  def backward(leaves, float_cts):
    it = iter(float_cts)
    cts = [
      next(it) if _inexact(o) else np.zeros(o.shape, jax.dtypes.float0)
      for o in holder["outs"]
    ]
    return jax.tree_util.tree_unflatten(holder["treedef"], leaves)(cts)

  try:
    leaves = jax.eval_shape(forward, *avals)
    floats = [o for o in holder["outs"] if _inexact(o)]
    traced = jax.make_jaxpr(backward)(leaves, floats)
  except Exception:  # Cannot tell: as if it could touch anything.
    return (Part("write", None, "custom_vjp backward pass"),)
  parts = []
  for e in all_eqns(traced.jaxpr):
    found = native_call(e, decls)
    if found is not None:
      parts += [Part(p.mode, None, p.target) for p in found[1]]
  return tuple(dict.fromkeys(parts))


def backward_in(jaxprs, decls: Declarations) -> bool:
  """Whether `jaxprs` (or their sub-jaxprs) call a custom_vjp whose
  backward pass makes a native call."""
  return any(
    backward_parts(e, decls) for jaxpr in jaxprs for e in all_eqns(jaxpr)
  )


def _inexact(aval) -> bool:
  return bool(jnp.issubdtype(aval.dtype, jnp.inexact))


def _ones_cotangent(out):
  if jnp.issubdtype(out.dtype, jnp.inexact):
    return jnp.ones_like(out)
  return np.zeros(out.shape, jax.dtypes.float0)


def first_native(eqn, decls) -> str:
  for sub in _sub_jaxprs(eqn):
    for e in all_eqns(sub):
      found = native_call(e, decls)
      if found is not None:
        return found[0]
  return "a native call"
