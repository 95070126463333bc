"""Which native calls a value must be computed after, as XLA keeps it.

`in_program_order` leaves an entangle out where a later call already comes
after an earlier one. That is safe only where XLA must keep the dependency:
a native call's operands are computed before it runs, an ``entangle``'s
payload after its witnesses, and a view or a conversion of one value
(reshape, slice, ...) after that value, and a sum of one value that depends
on calls and others that do not after that value. Other data flow is XLA's to
simplify: ``jnp.where(p, t, t)`` is ``t``, ``t + v * 0`` is ``t`` for
integers, a slice of a concatenation is one of its parts, and a tuple a
nested ``jit`` returns is one value each. Results of such equations depend
on nothing here, so the calls they came from are ordered by an entangle.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jax.extend import core as jex_core

from entangle_jax._src import primitive
from entangle_jax._src.program_order import call_like

# Results computed from their first operand alone, and from all of it:
# however XLA rewrites them, they are read from that operand's buffer.
_FROM_FIRST = frozenset(
  {
    "reshape",
    "squeeze",
    "expand_dims",
    "broadcast_in_dim",
    "transpose",
    "convert_element_type",
    "bitcast_convert_type",
    "reduce_precision",
    "copy",
    "copy_p",
    "slice",
    "dynamic_slice",
    "gather",
    "rev",
    "neg",
    "not",
  }
)

# Results that, for fixed other operands, are a one-to-one function of each
# operand: XLA can drop an operand of one only when the others cancel it
# (``t - t``), so one operand that depends on calls, beside others that
# depend on none, is kept.
_ONE_TO_ONE = frozenset({"add", "sub", "add_any"})


def kept_deps(eqn, in_deps: Sequence[int]) -> list[int]:
  """Per result of `eqn`, the calls (bits) it must be computed after, given
  those of its inputs (`in_deps`)."""
  name = eqn.primitive.name
  n = len(eqn.outvars)
  if name == primitive.entangle_p.name:
    bits = 0
    for b in in_deps:
      bits |= b
    return [bits if _size(v) else 0 for v in eqn.outvars]
  if name in _FROM_FIRST and in_deps:
    if not _size(eqn.invars[0]):
      return [0] * n
    return [in_deps[0] if _size(v) else 0 for v in eqn.outvars]
  if name in _ONE_TO_ONE:
    with_deps = [k for k, b in enumerate(in_deps) if b]
    if len(with_deps) == 1 and all(_size(v) for v in eqn.invars):
      return [in_deps[with_deps[0]] if _size(v) else 0 for v in eqn.outvars]
    return [0] * n
  # Calls XLA inlines: their results depend as their bodies' do.
  if name in call_like.INLINED:
    inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    if inner is not None:
      return jaxpr_deps(inner, in_deps)
  return [0] * n


def jaxpr_deps(closed, in_deps: Sequence[int]) -> list[int]:
  """`kept_deps` through a whole jaxpr (its constants depend on nothing)."""
  jaxpr = closed.jaxpr if isinstance(closed, jex_core.ClosedJaxpr) else closed
  env: dict = {}
  for var, bits in zip(jaxpr.invars, in_deps, strict=True):
    env[var] = bits

  def read(atom) -> int:
    if isinstance(atom, jex_core.Literal):
      return 0
    return env.get(atom, 0)

  for e in jaxpr.eqns:
    for var, bits in zip(
      e.outvars, kept_deps(e, [read(a) for a in e.invars]), strict=True
    ):
      env[var] = bits
  return [read(a) for a in jaxpr.outvars]


def _size(var) -> int:
  return shape_size(getattr(getattr(var, "aval", None), "shape", ()))


def shape_size(shape) -> int:
  """The number of elements of `shape`, a symbolic dimension (``jax.export``)
  counted as 1: JAX takes each to be at least 1, so such a value has
  elements."""
  size = 1
  for d in shape:
    size *= int(d) if isinstance(d, int | np.integer) else 1
  return size
