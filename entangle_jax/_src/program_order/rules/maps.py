"""Maps and sharding: nested calls (``jit``, ``pjit``, ``closed_call``,
``core_call``), inlined with their shardings kept as constraints; and
``shard_map``, rebuilt around its transformed body."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import jax

from entangle_jax._src import access_policy, conflict_rule, reason_words
from entangle_jax._src.program_order import call_like, natives
from entangle_jax._src.program_order.natives import (
  backward_in,
)
from entangle_jax._src.program_order.rule_inputs import (
  ChildStart,
  RuleResult,
  after_sub,
)
from entangle_jax._src.program_order.rules.registry import family, register
from entangle_jax._src.program_order.touches import (
  ANY,
)
from entangle_jax._src.program_order.values import (
  open_jaxpr,
  own_parts,
  token_after,
)
from entangle_jax._src.targets import names

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import Inlined, ShardMap
  from entangle_jax._src.targets.declaration import Declarations

MAPS = family(
  "maps and sharding",
  "a nested call is inlined, its shardings kept as constraints; "
  "`shard_map` is rebuilt with `jax.shard_map`, earlier calls coming in as "
  "a replicated order value and each device's calls going out as one "
  "element of a sharded one",
  __name__.rsplit(".", 1)[-1],
)


@register(MAPS, call_like.NESTED_CALLS)
def call(ctx: Inlined, eqn, invals) -> RuleResult:
  """Inlined; the shardings it was given stay as constraints."""
  closed = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
  jaxpr, consts = open_jaxpr(closed)
  invals = _constrained(invals, eqn.params.get("in_shardings"))
  outs = ctx.run(jaxpr, consts, invals)
  return RuleResult(_constrained(outs, eqn.params.get("out_shardings")))


@register(MAPS, ("shard_map",))
def shard_map(ctx: ShardMap, eqn, invals) -> RuleResult:
  """Rebuilds the shard_map around the transformed body: earlier calls
  come in as a replicated int32 order value, and each device's calls go
  out as one element of an order value sharded over the manual axes."""
  p = eqn.params
  jaxpr, consts = open_jaxpr(p["jaxpr"])
  mesh = p["mesh"]
  manual = frozenset(p.get("manual_axes", mesh.axis_names))
  axes = tuple(a for a in mesh.axis_names if a in manual)
  parts = ctx.sub_parts([jaxpr])
  token_in = ctx.order_token(parts or ANY)
  holder = {}
  # The backward chain comes in replicated and goes out as one element
  # a device, summed: its cotangent reaches every device's backward
  # passes, and what they hand on is summed over the devices.
  chained = backward_in([jaxpr], ctx.decls)
  chain_in = [ctx.take_chain()] if chained else []
  spec = jax.sharding.PartitionSpec

  def body(token, *args):
    chain, args = args[: len(chain_in)], args[len(chain_in) :]
    # Every call in the body logged, nested ones included.
    inner = ctx.child(
      ChildStart(after=token, chain=chain[0] if chained else None, log=True)
    )
    outs = inner.run(jaxpr, consts, list(args))
    holder["parts"] = own_parts(inner)
    holder["calls"] = inner.native_log
    holder["split"] = {
      id(a)
      for a, s in zip(args, p["in_specs"], strict=True)
      if _split(s, mesh, manual)
    }
    chain_out = [inner.chain.reshape((1,))] if chained else []
    return (*outs, token_after(inner.exported()).reshape((1,)), *chain_out)

  mapped = jax.shard_map(
    body,
    mesh=mesh,
    in_specs=(spec(), *[spec()] * len(chain_in), *p["in_specs"]),
    out_specs=(
      *p["out_specs"],
      spec(axes),
      *[spec(axes)] * len(chain_in),
    ),
    axis_names=set(manual),
    check_vma=bool(p.get("check_vma", True)),
  )
  results = mapped(token_in, *chain_in, *invals)
  # On a mesh of one device the body has no copy to race with (nor does
  # the race check report any).
  if math.prod(mesh.shape.values()) > 1:
    _warn_across_devices(
      ctx.decls, holder.get("calls", ()), holder.get("split", ())
    )
  chain = None
  if chained:
    *outs, token, chain = results
    chain = chain.sum()
  else:
    *outs, token = results
  return after_sub(
    outs, holder.get("parts", ()), token, "shard_map", chain=chain
  )


def _split(spec, mesh, manual: frozenset) -> bool:
  """Whether a shard_map input of partition spec `spec` is split over
  every device the body runs on: over each manual axis of more than one
  device (split over some axes only, the devices along the others hold
  the same elements)."""
  used = set()
  for entry in spec or ():
    names = entry if isinstance(entry, tuple) else (entry,)
    used.update(n for n in names if n is not None)
  sizes = dict(mesh.shape)
  return all(a in used for a in manual if sizes.get(a, 1) > 1)


def _warn_across_devices(decls: Declarations, parts, split) -> None:
  """Warns of the writes in a shard_map body that may race with their
  copies on the other devices: the race check reports those pairs (its
  device rule), and nothing in one program can order calls on two
  devices. Left out: targets declared ``devices = "per-device"``, and
  writes on elements of an input split over the devices whose targets
  declare distinct elements distinct (each device its own objects)."""
  named = set()
  for part in parts:
    if part.mode != "write" or part.target in named:
      continue
    if part.target in names.XLA_COLLECTIVE_PRIMITIVES:
      continue  # Its copies on the devices are the collective itself.
    scope = access_policy.device_scope(decls, part.target)
    obj = part.obj
    # The call and its copy on another device, as the one rule sees them
    # (the race check's device rule): shards of one split input are
    # different elements, which a distinct_elements declaration tells
    # apart.
    split_input = obj is not None and obj.key in split
    copies = conflict_rule.verdict(
      "write",
      "write",
      safe=False,
      evidence=conflict_rule.Evidence(
        distinct=split_input and scope.distinct_elements,
        elements=split_input,
      ),
      devices=(scope.devices, scope.devices),
    )
    if not copies.conflict:
      continue
    named.add(part.target)
    verb = "writes" if scope.declared else "may write"
    # The race check's words for such a pair, read from the one table.
    words = reason_words.ACROSS_DEVICES
    warnings.warn(
      f"in_program_order: `{part.target}` {verb} inside a shard_map, which "
      "runs its body on every device at once: its copies may race with "
      "each other on an object the devices share, and the race check "
      f"reports such pairs [{words.code}: {words.headline_with()}]. Fix: "
      + " ".join(words.steps),
      stacklevel=natives.user_stacklevel(),
    )


def _constrained(values: list, shardings) -> list:
  """`values`, each with its sharding (a `jax.sharding.Sharding` of the
  nested jit's) as a constraint; an unspecified one leaves it alone."""
  if not shardings:
    return values
  return [
    jax.lax.with_sharding_constraint(v, s) if _auto_sharding(s) else v
    for v, s in zip(values, shardings, strict=True)
  ]


def _auto_sharding(sharding) -> bool:
  """A sharding to keep as a constraint: one over a mesh of automatic
  axes only (with explicit axes the sharding is in the values' types)."""
  if not isinstance(sharding, jax.sharding.Sharding):
    return False
  mesh = getattr(sharding, "mesh", None)
  types = getattr(mesh, "axis_types", ())
  return all(t == jax.sharding.AxisType.Auto for t in types)
