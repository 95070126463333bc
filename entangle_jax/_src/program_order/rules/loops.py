"""Loops: ``scan`` and ``while``, rebuilt with their public functions,
each iteration's calls ordered after the previous one's: through the carry
where data already orders them, else through one more order value in the
carry."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from entangle_jax._src import jax_compat
from entangle_jax._src.entangle import entangle
from entangle_jax._src.program_order.natives import (
  backward_in,
  has_native_jaxpr,
)
from entangle_jax._src.program_order.rule_inputs import (
  AS_PARENT,
  ChildStart,
  RuleResult,
  Summary,
  after_sub,
)
from entangle_jax._src.program_order.rules.registry import family, register
from entangle_jax._src.program_order.touches import (
  ANY,
  conflicts,
)
from entangle_jax._src.program_order.values import (
  all_bits,
  aval_of,
  deps_of,
  open_jaxpr,
  placeholder,
  placeholder_x,
  size,
  token_of,
)

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import Loop, SubEvaluation

LOOPS = family(
  "loops",
  "rebuilt with `jax.lax.scan` and `jax.lax.while_loop`; each iteration's "
  "calls come after the previous one's, through the carry where data "
  "already orders them, else through one more order value in the carry",
  __name__.rsplit(".", 1)[-1],
)


@register(LOOPS, ("scan",))
def scan(ctx: Loop, eqn, invals) -> RuleResult:
  p = eqn.params
  n_consts, n_carry = jax_compat.scan_counts(p)
  consts = invals[:n_consts]
  init = invals[n_consts : n_consts + n_carry]
  xs = invals[n_consts + n_carry :]
  jaxpr, jconsts = open_jaxpr(p["jaxpr"])
  chained = backward_in([jaxpr], ctx.decls)

  def body(use_token):
    def fn(carry, x):
      carry, chain = carry
      if use_token:
        carry, token = carry
      inner = body_child(
        ctx,
        use_token and token,
        token_deps,
        ChildStart(seed=(consts, consts), chain=chain),
      )
      outs = inner.run(jaxpr, jconsts, [*consts, *carry, *x])
      new_carry, ys = outs[:n_carry], outs[n_carry:]
      if use_token:
        new_carry = (new_carry, loop_token(inner, token, axes))
      return (new_carry, inner.chain), ys

    return fn

  token_deps = 0
  axes = varying_axes(invals)

  def run_loop(use_token, init_token=None):
    nonlocal token_deps
    token_deps = ctx.dep(init_token) if use_token else 0
    if use_token:
      init_token = jax_compat.make_varying(init_token, axes)
    carry = (init, init_token) if use_token else init
    # The backward chain goes through the loop's carry when its body
    # calls a custom_vjp whose backward pass makes native calls.
    chain = ctx.take_chain() if chained else None
    (carry, chain), ys = jax.lax.scan(
      body(use_token),
      (carry, chain),
      xs,
      length=p["length"],
      reverse=p["reverse"],
      unroll=p.get("unroll", 1),
    )
    return carry, ys, chain if chained else None

  def analyse():
    return loop_analysis(
      ctx,
      lambda inner, carry_in, x_in: inner.run(
        jaxpr, jconsts, [*consts, *carry_in, *x_in]
      )[:n_carry],
      init,
      consts,
      xs,
    )

  return loop(ctx, analyse, run_loop, invals, "scan", split=n_carry)


@register(LOOPS, ("while",))
def while_loop(ctx: Loop, eqn, invals) -> RuleResult:
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  cconsts, bconsts, init = (
    invals[:nc],
    invals[nc : nc + nb],
    invals[nc + nb :],
  )
  cjaxpr, cjconsts = open_jaxpr(p["cond_jaxpr"])
  bjaxpr, bjconsts = open_jaxpr(p["body_jaxpr"])
  cond_native = has_native_jaxpr(cjaxpr, ctx.decls, scopes=ctx.scopes())

  axes = varying_axes(invals)

  def run_loop(use_token, init_token=None):
    token_deps = ctx.dep(init_token) if use_token else 0
    if use_token:
      init_token = jax_compat.make_varying(init_token, axes)

    def cond_fn(carry):
      if use_token:
        carry, token = carry
      inner = body_child(ctx, use_token and token, token_deps)
      (pred,) = inner.run(cjaxpr, cjconsts, [*cconsts, *carry])
      return pred

    def body_fn(carry):
      if use_token:
        carry, token = carry
      inner = body_child(ctx, use_token and token, token_deps)
      outs = inner.run(bjaxpr, bjconsts, [*bconsts, *carry])
      if use_token:
        return outs, loop_token(inner, token, axes)
      return outs

    carry = (list(init), init_token) if use_token else list(init)
    out = jax.lax.while_loop(cond_fn, body_fn, carry)
    return out, [], None

  def analyse():
    if cond_native:
      return None  # Calls in the condition: order through the token.
    return loop_analysis(
      ctx,
      lambda inner, carry_in, _: inner.run(
        bjaxpr, bjconsts, [*bconsts, *carry_in]
      ),
      init,
      bconsts,
      [],
    )

  # With calls in the condition there is no analysis of the body: what
  # the loop touches is then the condition's calls and the body's, so
  # that calls after the loop are ordered after the body's writes too.
  return loop(
    ctx,
    analyse,
    run_loop,
    invals,
    "while_loop",
    split=len(init),
    extra_jaxprs=[cjaxpr, bjaxpr] if cond_native else [cjaxpr],
  )


def body_child(
  ctx: Loop, token, deps: int, start: ChildStart = AS_PARENT
) -> SubEvaluation:
  """The evaluation of one iteration's body (or condition): its calls all
  come after `token`, the order value in the carry, which comes after the
  calls in `deps`; with no order value (`token` False), after none, the
  carries alone ordering them. `start`: the rest of how it starts."""
  if token is False or token is None:
    return ctx.child(dataclasses.replace(start, earlier=()))
  return ctx.child(dataclasses.replace(start, after=token, deps=deps))


def varying_axes(values) -> frozenset:
  """The manual mesh axes any of a loop's inputs `values` varies over
  inside a ``shard_map``: what its order value varies over, in and out
  of each iteration, so that the two types agree (a value the body
  computes varies over no axis its inputs do not)."""
  return frozenset().union(*(jax_compat.varying_axes(v) for v in values))


def loop_token(inner: SubEvaluation, token, axes: frozenset = frozenset()):
  """The order value out of a loop body: after every call of the body
  and after `token`, the value that came in (so that the loop's last
  one comes after the first); varying over `axes` (`varying_axes`)."""
  exported = [w for w in inner.exported() if w is not token]
  if not exported:
    return token
  if deps_of(inner, exported) & inner.prev_bit:
    out = token_of(exported, aval_of(token), payload=token)
  else:
    out = entangle(token, *exported)
  return jax_compat.make_varying(out, axes)


@dataclasses.dataclass(frozen=True)
class BodyAnalysis:
  """What tracing a loop body once with no order value found."""

  parts: tuple
  """What the body's calls touch."""
  trusted: bool
  """Whether the carries alone order every iteration's calls after the
  previous one's and after the calls before the loop."""
  carrying: list[int]
  """The carries that come after the body's calls (when `trusted`)."""
  aval: Any = None
  """The type of the body's one exported value, when it has exactly one:
  the order value's type, so that it is that value (no entangle)."""


def loop_analysis(ctx: Loop, run_body, init, consts, xs) -> BodyAnalysis:
  """Traces the loop body once with no order value (`BodyAnalysis`):
  on placeholders of the initial carries `init` and of one element of
  each scanned array in `xs`, each varying over the manual mesh axes its
  value varies over (inside a ``shard_map``), as the body's own trace
  had them."""
  result = {}

  def probe(*flat_in):
    # A placeholder's type varies over no axis: without its value's axes,
    # a body that passes a carry and a varying value to one native call
    # fails to trace here, where the loop itself traced.
    flat_in = [
      jax_compat.make_varying(v, jax_compat.varying_axes(like))
      for v, like in zip(flat_in, [*init, *xs], strict=True)
    ]
    carry_in, x_in = flat_in[: len(init)], flat_in[len(init) :]
    inner = ctx.child(ChildStart(earlier=(), seed=(consts, consts)))
    # One bit a carry: which carries each call of the body comes after.
    carry_bits = [inner.mark(value) for value in carry_in]
    carry_out = run_body(inner, list(carry_in), list(x_in))
    result["inner"] = inner
    result["carry_bits"] = carry_bits
    result["out_deps"] = [inner.dep(v) for v in carry_out]
    exported = inner.exported()
    if len(exported) == 1:
      result["aval"] = aval_of(exported[0])
    return [jnp.zeros((), jnp.int32)]

  jax.make_jaxpr(probe)(
    *[placeholder(v) for v in init], *[placeholder_x(x) for x in xs]
  )
  aval = result.get("aval")
  inner = result["inner"]
  own = inner.own
  parts = tuple(p for a in own for p in a.parts)
  if not own:
    return BodyAnalysis(parts, True, [], aval)
  carry_bits, out_deps = result["carry_bits"], result["out_deps"]
  for j in own:
    for a in own:
      if not conflicts(a.parts, j.parts, ctx.decls):
        continue
      if not any(
        (j.deps & cb) and (od & a.bit)
        for cb, od in zip(carry_bits, out_deps, strict=True)
      ):
        return BodyAnalysis(parts, False, [], aval)
    # Before the loop: through the consts, or an initial carry.
    for p in ctx.accesses:
      if not conflicts(p.parts, j.parts, ctx.decls):
        continue
      if j.deps & p.bit:
        continue
      if not any(
        (j.deps & cb) and (ctx.dep(v) & p.bit)
        for cb, v in zip(carry_bits, init, strict=True)
      ):
        return BodyAnalysis(parts, False, [], aval)
  # After the loop: the carries must come after every call of the body.
  whole = 0
  for od in out_deps:
    whole |= od
  if any(not (a.bit & whole) for a in own):
    return BodyAnalysis(parts, False, [], aval)
  carrying = [k for k, od in enumerate(out_deps) if od & ~all_bits(carry_bits)]
  return BodyAnalysis(parts, True, carrying, aval)


def loop(
  ctx: Loop, analyse, run_loop, invals, label, split, extra_jaxprs=()
) -> RuleResult:
  """Orders a loop: through its carries where the body's analysis trusts
  them, else through an order value in the carry. `run_loop(use_token,
  init_token)` rebuilds it: ``(carry, ys, chain out or None)``."""
  # None: a while loop with calls in its condition, its body not analysed.
  analysis = analyse() or BodyAnalysis((), trusted=False, carrying=[])
  parts, carrying = analysis.parts, analysis.carrying
  if not analysis.trusted:
    # Order through an order value in the carry: of the type of the
    # body's last call's result when one call comes after all others, so
    # that it is that result (no entangle), else an int32 scalar.
    every = ctx.sub_parts(extra_jaxprs) + parts
    init_token = ctx.order_token(every or ANY, analysis.aval)
    carry, ys, chain = run_loop(True, init_token)
    carry, token = carry
    outs = list(carry) + list(ys)
    # Each body's order value comes after the one that came in
    # (`loop_token`): the last after the first, and what it follows.
    return after_sub(
      outs, every or ANY, token, label, ctx.dep(init_token), chain=chain
    )
  carry, ys, chain = run_loop(False)
  outs = list(carry) + list(ys)
  if not parts:
    return RuleResult(outs, chain=chain)
  # The carries that come after the body's calls stand for them.
  witnesses = tuple(carry[k] for k in carrying if size(carry[k]) > 0)
  after = tuple(carry[k] for k in carrying)
  return RuleResult(
    outs, chain=chain, summary=Summary(parts, witnesses, 0, label, after)
  )
