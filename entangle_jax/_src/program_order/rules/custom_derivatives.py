"""Custom derivatives: ``custom_jvp_call`` and ``custom_vjp_call``,
rebuilt around the transformed primal and rules traced from ``jax.jvp`` and
``jax.vjp`` of the original call; backward passes through the backward
chain (`Context.link`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from entangle_jax._src import jax_compat
from entangle_jax._src.program_order.natives import (
  backward_parts,
  rule_parts,
)
from entangle_jax._src.program_order.rule_inputs import (
  ChildStart,
  RuleResult,
  after_sub,
)
from entangle_jax._src.program_order.rules.registry import family, register
from entangle_jax._src.program_order.touches import ANY
from entangle_jax._src.program_order.values import (
  open_jaxpr,
  own_parts,
  scalar_after,
)

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import (
    ChainedSubPrograms,
    SubEvaluation,
  )

CUSTOM_DERIVATIVES = family(
  "custom derivatives",
  "rebuilt with `jax.custom_jvp` and `jax.custom_vjp` around the ordered "
  "primal and the rules traced from `jax.jvp` and `jax.vjp` of the call; the "
  "JVP rule and forward pass are ordered as the primal, a backward pass after "
  "the forward program and the backward passes of later calls",
  __name__.rsplit(".", 1)[-1],
)


@register(CUSTOM_DERIVATIVES, ("custom_jvp_call",))
def custom_jvp(ctx: ChainedSubPrograms, eqn, invals) -> RuleResult:
  """Rebuilds the custom_jvp around the transformed primal and the
  transformed JVP rule (traced from ``jax.jvp`` of the original call).
  Earlier calls come in as an int32 order value, an argument: a
  custom_jvp may not close over values being differentiated."""
  closed = eqn.params["call_jaxpr"]
  # The JVP rule runs in the primal's place: ordered as its calls are.
  parts = ctx.sub_parts([closed.jaxpr]) + rule_parts(eqn, ctx.decls)
  holder = {"parts": parts}
  token_in = _token_in(ctx, parts, holder)

  def original(*args):
    return jax_compat.bind_equation(eqn, args)

  fn = jax.custom_jvp(ordered_primal(ctx, closed, invals, holder))

  @fn.defjvp
  def _jvp(primals, tangents):
    token, *primals = primals
    tangents = [
      jnp.zeros_like(p) if type(t).__name__ == "SymbolicZero" else t
      for p, t in zip(primals, tangents[1:], strict=True)
    ]
    rule = jax.make_jaxpr(lambda p, t: jax.jvp(original, tuple(p), tuple(t)))(
      list(primals), list(tangents)
    )
    inner = _inner(ctx, token, holder, (primals, invals))
    outs = inner.run(rule.jaxpr, rule.consts, [*primals, *tangents])
    holder["parts"] = holder.get("parts", ()) + own_parts(inner)
    n = len(outs) // 2
    zero = np.zeros((), jax.dtypes.float0)
    return (outs[:n], _token_out(inner, token, holder)), (outs[n:], zero)

  outs, token = fn(token_in, *invals)
  return _rebuilt_outputs(ctx, outs, token, "custom_jvp", token_in, holder)


def ordered_primal(ctx: ChainedSubPrograms, closed, invals, holder: dict):
  """The primal function of a rebuilt custom_jvp or custom_vjp:
  ``(token, *args) -> (outs, token out)``, its calls ordered after
  `token` and the token out after them; what they touch is added to
  ``holder["parts"]``."""

  def primal(token, *args):
    inner = _inner(ctx, token, holder, (args, invals))
    jaxpr, consts = open_jaxpr(closed)
    outs = inner.run(jaxpr, consts, list(args))
    holder["parts"] = holder.get("parts", ()) + own_parts(inner)
    return outs, _token_out(inner, token, holder)

  return primal


_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)
"""The order value a rebuilt custom derivative takes and returns."""


def _token_in(ctx: ChainedSubPrograms, parts, holder: dict):
  """The order value after the earlier calls that `parts` conflict with:
  the one such call's int32 scalar result itself, else an entangle. Where
  none conflicts it orders nothing (``holder["orders"]`` False), and the
  calls inside are ordered among themselves only (`_inner`)."""
  token = ctx.order_token(parts or ANY, _TOKEN)
  holder["orders"] = bool(ctx.dep(token))
  return token


def _inner(ctx: ChainedSubPrograms, token, holder: dict, seed) -> SubEvaluation:
  """The context of a rebuilt function's calls, its values ``seed[0]``
  standing for ``seed[1]`` outside: after `token` where it orders
  anything; else a zero, which an entangle with would order nothing, and
  its calls come after none."""
  if holder.get("orders", True):
    return ctx.child(ChildStart(after=token, seed=seed))
  return ctx.child(ChildStart(earlier=(), seed=seed))


def _token_out(inner: SubEvaluation, token, holder: dict):
  """The order value after every call made in `inner`: one of their
  scalar results converted, else an entangle (`scalar_after`). Records in
  ``holder["after_in"]`` whether it comes after `token` too (every result
  it is made of does), so that later calls after it are known to come
  after what `token` came after (`_after_token_in`)."""
  exported = inner.exported()
  before = inner.dep(token)
  after_in = bool(exported) and all(inner.dep(v) & before for v in exported)
  holder["after_in"] = holder.get("after_in", True) and after_in
  return scalar_after(exported, jnp.zeros((), jnp.int32))


def _rebuilt_outputs(
  ctx: ChainedSubPrograms,
  outs,
  token,
  kind: str,
  token_in,
  holder,
  **decided,
) -> RuleResult:
  """The outputs of a rebuilt custom derivative of kind `kind`, after the
  calls it made (``holder["parts"]``), as later calls see them; with what
  else the rule `decided` (`rule_inputs.after_sub`'s keywords)."""
  return after_sub(
    outs,
    holder.get("parts", ()),
    token,
    kind,
    _after_token_in(ctx, token_in, holder),
    **decided,
  )


def _after_token_in(ctx: ChainedSubPrograms, token_in, holder: dict) -> int:
  """The calls the rebuilt function's order value out comes after besides
  its own: those `token_in` comes after, when every version of it traced
  (primal, forward pass, JVP rule) made its order value after `token_in`."""
  if holder.get("orders") and holder.get("after_in"):
    return ctx.dep(token_in)
  return 0


@register(CUSTOM_DERIVATIVES, ("custom_vjp_call",))
def custom_vjp(ctx: ChainedSubPrograms, eqn, invals) -> RuleResult:
  """Rebuilds the custom_vjp around transformed functions: the primal,
  the forward pass and the backward pass (traced from ``jax.vjp`` of the
  original call, so that its rules are the user's), each ordered; the
  backward pass after the forward pass's calls. When the backward pass
  makes native calls, the custom_vjp also takes and returns the backward
  chain (`link`): its backward pass runs after the chain's cotangent and
  hands the cotangent on after its own calls."""
  closed = eqn.params["call_jaxpr"]
  n_out = len(closed.jaxpr.outvars)
  # The forward pass runs in the primal's place: ordered as its calls are.
  parts = ctx.sub_parts([closed.jaxpr]) + rule_parts(eqn, ctx.decls)
  holder = {"parts": parts}
  token_in = _token_in(ctx, parts, holder)
  # What the backward pass touches, recorded by the interpreter from the
  # result (the chain's cotangent is ordered by it only at the end).
  backward = backward_parts(eqn, ctx.decls)
  if backward:
    chain_in = ctx.take_chain()

  def original(*args):
    return jax_compat.bind_equation(eqn, args)

  ordered = ordered_primal(ctx, closed, invals, holder)

  def primal(token, chain, *args):
    outs, token = ordered(token, *args)
    return outs, token, chain

  fn = jax.custom_vjp(primal)

  def fwd(token, chain, *args):
    def vjp_leaves(*a):
      outs, pullback = jax.vjp(original, *a)
      leaves, treedef = jax.tree_util.tree_flatten(pullback)
      holder["pullback"] = treedef
      return [*outs, *leaves]

    traced = jax.make_jaxpr(vjp_leaves)(*args)
    inner = _inner(ctx, token, holder, (args, invals))
    outs = inner.run(traced.jaxpr, traced.consts, list(args))
    holder["parts"] = holder.get("parts", ()) + own_parts(inner)
    token = _token_out(inner, token, holder)
    return (outs[:n_out], token, chain), (outs[n_out:], token)

  def bwd(res, cts):
    residuals, token = res
    cts, _, chain_ct = cts
    treedef = holder["pullback"]

    def pull(r, c):
      return jax.tree_util.tree_unflatten(treedef, r)(c)

    traced = jax.make_jaxpr(pull)(list(residuals), list(cts))
    before = [(token, "forward pass")]
    if backward:
      before.append((chain_ct, "later calls"))
    inner = ctx.child(ChildStart(earlier=before))
    flat_in = jax.tree_util.tree_leaves((list(residuals), list(cts)))
    outs = inner.run(traced.jaxpr, traced.consts, flat_in)
    # The chain's cotangent handed on after this pass's calls: one of
    # their results converted, or an entangle (`scalar_after`).
    chain_ct = scalar_after(inner.exported(), chain_ct)
    return (np.zeros((), jax.dtypes.float0), chain_ct, *outs)

  # The chain's cotangent, one of the backward calls' results converted,
  # is batched under vmap where the chain is not (`generic_batching_options`).
  fn.defvjp(fwd, bwd, **jax_compat.generic_batching_options())
  chain = chain_in if backward else jnp.zeros((), jnp.float32)
  outs, token, chain = fn(token_in, chain, *invals)
  return _rebuilt_outputs(
    ctx,
    outs,
    token,
    "custom_vjp",
    token_in,
    holder,
    chain=chain if backward else None,
    backward=backward,
  )
