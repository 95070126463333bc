"""Which native calls a value must be computed after, as XLA keeps it.

`in_program_order` leaves an entangle out where a later call already comes
after an earlier one. That is safe only where XLA must keep the dependency:
a native call's operands are computed before it runs, an ``entangle``'s
payload after its witnesses, and a view or a conversion of one value
(reshape, slice, ...) after that value, and a sum of one value that depends
on calls and others computed from no call after that value. Other data flow
is XLA's to simplify: ``jnp.where(p, t, t)`` is ``t``, ``t + v * 0`` is
``t`` for integers, a slice of a concatenation is one of its parts, and a
tuple a nested ``jit`` returns is one value each. Results of such equations
depend on nothing here, so the calls they came from are ordered by an
entangle.
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
# (``t - t``, ``jnp.maximum(t, t) - t``), so one operand that depends on
# calls, beside others computed from no call, is kept.
_ONE_TO_ONE = frozenset({"add", "sub", "add_any"})


def kept_deps(
  eqn, in_deps: Sequence[int], in_flows: Sequence[bool] | None = None
) -> list[int]:
  """Per result of `eqn`, the calls (bits) it must be computed after, given
  those of its inputs (`in_deps`), and whether each input is computed from
  a call's result at all (`in_flows`; by default, where it has calls)."""
  name = eqn.primitive.name
  n = len(eqn.outvars)
  flows = [bool(b) for b in in_deps] if in_flows is None else list(in_flows)
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
    # The others must be computed from no call at all: one with no kept
    # calls may still come from the same call (``jnp.maximum(t, t) - t``
    # is 0 once XLA folds the maximum).
    if (
      len(with_deps) == 1
      and all(_size(v) for v in eqn.invars)
      and not any(f for k, f in enumerate(flows) if k != with_deps[0])
    ):
      return [in_deps[with_deps[0]] if _size(v) else 0 for v in eqn.outvars]
    return [0] * n
  # Calls XLA inlines: their results depend as their bodies' do.
  if name in call_like.INLINED:
    inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    if inner is not None:
      return jaxpr_deps(inner, in_deps, flows)
  return [0] * n


def jaxpr_deps(
  closed, in_deps: Sequence[int], in_flows: Sequence[bool] | None = None
) -> list[int]:
  """`kept_deps` through a whole jaxpr (its constants depend on nothing)."""
  jaxpr = closed.jaxpr if isinstance(closed, jex_core.ClosedJaxpr) else closed
  if in_flows is None:
    in_flows = [bool(b) for b in in_deps]
  env: dict = {}
  flow: dict = {}
  for var, bits, flows in zip(jaxpr.invars, in_deps, in_flows, strict=True):
    env[var] = bits
    flow[var] = flows

  def read(atom) -> int:
    if isinstance(atom, jex_core.Literal):
      return 0
    return env.get(atom, 0)

  def flows_from(atom) -> bool:
    return not isinstance(atom, jex_core.Literal) and flow.get(atom, False)

  for e in jaxpr.eqns:
    ins = [read(a) for a in e.invars]
    in_flow = [flows_from(a) for a in e.invars]
    for var, bits in zip(e.outvars, kept_deps(e, ins, in_flow), strict=True):
      env[var] = bits
      flow[var] = bool(bits) or any(in_flow)
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
