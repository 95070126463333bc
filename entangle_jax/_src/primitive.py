"""The `entangle` primitive: evaluation, abstract evaluation, batching and AD.

The primitive takes ``num_payload`` payload operands followed by any number of
witness operands and returns the payload operands unchanged. It lowers to one
XLA custom call whose results alias the payload operands, so XLA has to treat
each result as a new value that depends on every witness, while at run time
the call does nothing.

Operands reaching the primitive are physical arrays: the public wrapper in
`entangle_jax._src.entangle` unwraps extended dtypes (PRNG keys) before
binding. Its lowering to XLA lives in `entangle_jax._src.lowering`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from entangle_jax._src import jax_compat

entangle_p = Primitive("entangle")
entangle_p.multiple_results = True


MAX_LEAVES_PER_CALL = 128
"""The most payload leaves one custom call aliases; more take several calls.

XLA's compile time grows much faster than linearly with the number of
output-operand aliases on one instruction (most of it in XLA:CPU's fusion
pass), so `bind` gives each chunk of at most this many payload leaves a call
of its own; the benchmark's compile-time part measures the choice against
``optimization_barrier`` (docs/performance.md). Every call takes every
witness, so each result is still ordered after all witnesses, and no leaf is
copied.
"""


def bind(
  payload: Sequence[Any], witnesses: Sequence[Any]
) -> Sequence[jax.Array]:
  """Binds the primitive: payload arrays come back ordered after witnesses.

  One primitive (one custom call) for up to `MAX_LEAVES_PER_CALL` payload
  leaves; one per chunk of that many beyond.

  A witness that is one of the chunk's own payload arrays (the same object,
  as in ``entangle((t, x), x)``) is not passed again: it is already an
  operand, and every result of the call depends on every operand, while an
  operand that is both aliased and read would make XLA copy it. A
  single-leaf chunk left without witnesses is returned as is: it is ordered
  after itself.
  """
  results = []
  for start in range(0, len(payload), MAX_LEAVES_PER_CALL):
    chunk = payload[start : start + MAX_LEAVES_PER_CALL]
    others = [w for w in witnesses if not any(w is p for p in chunk)]
    if not others and len(chunk) == 1:
      results += chunk
      continue
    results += entangle_p.bind(*chunk, *others, num_payload=len(chunk))
  return results


@functools.cache
def _compiled_impl(num_payload: int):
  def entangle(*operands):
    return entangle_p.bind(*operands, num_payload=num_payload)

  # JAX's errors about the arguments (devices, for instance) name this.
  entangle.__qualname__ = "entangle"
  return jax.jit(entangle)


def _impl(*args, num_payload: int):
  # Eagerly, run the real custom call: the payload result then becomes ready
  # only once every witness buffer is, which is the eager meaning of ordering.
  # Under `jax.disable_jit` the jitted function would bind the primitive
  # eagerly again, and so on forever: compile it anyway, as JAX does for its
  # own primitives.
  with jax.disable_jit(False):
    return _compiled_impl(num_payload)(*args)


def _abstract_eval(*avals, num_payload: int):
  return avals[:num_payload]


def _batch(args, dims, *, num_payload: int):
  # Every operand keeps its own batch dimension; the custom call is shape
  # agnostic, so a batched entangle is one entangle on batched operands.
  return entangle_p.bind(*args, num_payload=num_payload), dims[:num_payload]


def _jvp(primals, tangents, *, num_payload: int):
  primals_out = entangle_p.bind(*primals, num_payload=num_payload)
  witnesses = primals[num_payload:]
  payload_tangents = tangents[:num_payload]
  live = [i for i, t in enumerate(payload_tangents) if type(t) is not ad.Zero]
  # A symbolic-zero tangent stays one: its aval is the output's tangent aval.
  tangents_out = list(payload_tangents)
  if live:
    # Tangents are ordered after the witnesses too, so forward-mode code that
    # feeds tangents into native calls keeps the primal program's order.
    entangled = bind([payload_tangents[i] for i in live], witnesses)
    for i, tangent in zip(live, entangled, strict=True):
      tangents_out[i] = tangent
  return primals_out, tangents_out


def _transpose(cotangents, *operands, num_payload: int):
  # Linear in the payload (the identity), constant in the witnesses.
  num_witnesses = len(operands) - num_payload
  return [*cotangents, *([None] * num_witnesses)]


def _jet(primals, series, *, num_payload: int):
  """Taylor series of the identity: the payload's terms pass through.

  Like tangents under JVP, the terms are ordered after the witnesses too, so
  code that feeds them into native calls keeps the primal program's order.
  (jet hands rules every term as an array, zeros included.)
  """
  primals_out = entangle_p.bind(*primals, num_payload=num_payload)
  payload_series = series[:num_payload]
  terms = [term for leaf_terms in payload_series for term in leaf_terms]
  if not terms:
    return primals_out, [list(leaf_terms) for leaf_terms in payload_series]
  entangled = iter(bind(terms, primals[num_payload:]))
  series_out = [
    [next(entangled) for _ in leaf_terms] for leaf_terms in payload_series
  ]
  return primals_out, series_out


entangle_p.def_impl(_impl)
entangle_p.def_abstract_eval(_abstract_eval)
batching.primitive_batchers[entangle_p] = _batch
ad.primitive_jvps[entangle_p] = _jvp
ad.primitive_transposes[entangle_p] = _transpose
jax_compat.jet_rules[entangle_p] = _jet
