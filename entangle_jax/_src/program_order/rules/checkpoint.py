"""Checkpoint: ``checkpoint`` (``jax.checkpoint``, ``jax.remat``), rebuilt
around its transformed body; native results are saved, never made again."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from entangle_jax._src.program_order import call_like
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
  SAVED,
  common,
  own_parts,
)

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import Checkpoint

CHECKPOINT = family(
  "checkpoint",
  "rebuilt with `jax.checkpoint`; a native call's result is saved by name, "
  "never made again under differentiation (it would see a later state)",
  __name__.rsplit(".", 1)[-1],
)


@register(CHECKPOINT, call_like.CHECKPOINTS)
def remat(ctx: Checkpoint, eqn, invals) -> RuleResult:
  """Rebuilds a checkpoint around its transformed body. Its native
  calls' results are saved (a policy that saves them by name), never
  made again under differentiation: a call made again would see a later
  state. A checkpoint that JAX's differentiation made to recompute
  forward values (``differentiated``, in a differentiated program
  transformed whole) takes the results of the calls made before."""
  params = eqn.params
  jaxpr = params["jaxpr"]
  holder = {}
  chained = backward_in([jaxpr], ctx.decls)
  recompute = bool(params.get("differentiated", False))

  def fn(chain, *args):
    inner = ctx.child(
      ChildStart(
        seed=(args, invals),
        chain=chain,
        saving=not recompute,
        recompute=recompute,
      )
    )
    outs = inner.run(jaxpr, (), list(args))
    holder["parts"] = own_parts(inner)
    exported = inner.exported()
    holder["deps"] = common([inner.dep(e) for e in exported])
    return outs, exported, inner.chain

  kwargs = {"prevent_cse": params.get("prevent_cse", True)}
  saving = jax.checkpoint_policies.save_only_these_names(SAVED)
  if params.get("policy") is not None:
    saving = jax.checkpoint_policies.save_from_both_policies(
      params["policy"], saving
    )
  kwargs["policy"] = saving
  chain = ctx.take_chain() if chained else None
  outs, exported, chain = jax.checkpoint(fn, **kwargs)(chain, *invals)
  return after_sub(
    outs,
    holder.get("parts", ()),
    exported,
    "checkpoint",
    holder.get("deps", 0),
    chain=chain if chained else None,
  )
