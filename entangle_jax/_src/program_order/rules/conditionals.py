"""Conditionals: ``cond`` (``jax.lax.cond`` and ``jax.lax.switch``),
rebuilt around its transformed branches; one order value out of whichever
branch ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from entangle_jax._src import jax_compat
from entangle_jax._src.program_order.natives import (
  backward_in,
)
from entangle_jax._src.program_order.rule_inputs import (
  ChildStart,
  RuleResult,
  after_sub,
)
from entangle_jax._src.program_order.rules.registry import family, register
from entangle_jax._src.program_order.values import (
  aval_of,
  common,
  deps_of,
  is_bool,
  open_jaxpr,
  token_of,
)

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import ChainedSubPrograms

CONDITIONALS = family(
  "conditionals",
  "rebuilt with `jax.lax.cond` or `jax.lax.switch`; each branch's calls "
  "come after the earlier ones, and later calls after the branch that ran",
  __name__.rsplit(".", 1)[-1],
)


@register(CONDITIONALS, ("cond",))
def cond(ctx: ChainedSubPrograms, eqn, invals) -> RuleResult:
  branches = eqn.params["branches"]
  index, *ops = invals
  parts = ctx.sub_parts([b.jaxpr for b in branches])
  chained = backward_in([b.jaxpr for b in branches], ctx.decls)
  chain = ctx.take_chain() if chained else None

  follows = []  # Per branch traced, the calls its order value follows.
  # Inside a shard_map, every branch's order value varies over the manual
  # axes its operands vary over, so that the branches' types agree
  # whichever calls each makes (jax 0.6 types a native result varying).
  axes = frozenset().union(*(jax_compat.varying_axes(o) for o in ops))

  def branch_fn(closed, aval=None, found=None):
    def fn(*args):
      inner = ctx.child(ChildStart(seed=(args, ops), chain=chain))
      jaxpr, consts = open_jaxpr(closed)
      outs = inner.run(jaxpr, consts, list(args))
      exported = inner.exported()
      if found is not None:
        found.append([aval_of(e) for e in exported])
      else:
        follows.append(deps_of(inner, exported))
      token = jax_compat.make_varying(token_of(exported, aval), axes)
      return outs, token, inner.chain

    return fn

  # The order value out: the branches' one last result where each branch
  # with calls has one, of one type (no entangle); else an int32 scalar.
  found = []
  for b in branches:
    jax.make_jaxpr(branch_fn(b, found=found))(*ops)
  kinds = {tuple(f) for f in found if f}
  aval = None
  if len(kinds) == 1 and len(next(iter(kinds))) == 1:
    aval = next(iter(kinds))[0]
  fns = [branch_fn(b, aval) for b in branches]
  if is_bool(index):
    outs, token, chain = jax.lax.cond(index, fns[1], fns[0], *ops)
  else:
    outs, token, chain = jax.lax.switch(index, fns, *ops)
  return after_sub(
    outs,
    parts,
    token,
    "cond",
    common(follows),
    chain=chain if chained else None,
  )
