"""The evaluation of a jaxpr that adds the order: `Context` runs each
equation again, entangling native calls with the earlier calls they
conflict with, and rebuilds the sub-programs that hold native calls."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.extend import core as jex_core

from entangle_jax._src import jax_compat, primitive
from entangle_jax._src.entangle import entangle
from entangle_jax._src.program_order.dependence import kept_deps, shape_size
from entangle_jax._src.program_order.natives import (
  NativeCall,
  all_eqns,
  backward_in,
  backward_parts,
  first_native,
  has_native,
  has_native_jaxpr,
  native_call,
  rule_parts,
)
from entangle_jax._src.program_order.objects import (
  ANY,
  VIEWS,
  Access,
  Obj,
  Part,
  apply_view,
  conflicts,
  constant_array,
  covers,
  new_bit,
  resource_record,
)
from entangle_jax._src.targets import names
from entangle_jax._src.targets.declaration import Declarations

_LOOPS = ("scan", "while")


_CALLS = ("pjit", "jit", "closed_call", "core_call")


_REMAT = ("checkpoint", "remat", "remat2")


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


class Context:
  """One program's evaluation: the native calls made so far, and for each
  value the calls it depends on and the object it names."""

  def __init__(self, decls: Declarations, accesses: Sequence[Access] = ()):
    self.decls = decls
    self.accesses: list[Access] = list(accesses)
    self.own: list[Access] = []  # Made in this context.
    self.deps: dict[int, int] = {}
    self.roots: dict[int, Obj] = {}
    self.used: set[int] = set()
    self.keep: list[Any] = []
    self.loop_aval = None
    # The backward chain: a float32 scalar threaded through every rebuilt
    # custom_vjp whose backward pass makes native calls (None until one
    # does). Its cotangent orders those backward passes (`link`).
    self.chain: Any = None
    self.backward: list[Part] = []  # What those backward passes touch.
    self.prev_bit = 0  # In a loop body: the call the order value stands for.
    # Native results by what computes them (`_key`), for a checkpoint that
    # JAX's differentiation recomputes (`remat`): it takes the result saved
    # here, since a native call made again would see a later state.
    self.keys: dict[int, Any] = {}
    self.saved: dict[Any, Any] = {}
    self.top = True  # Not inside a function traced again (a loop body ...).
    self.saving = False  # In a rebuilt checkpoint: native results saved.
    self.recompute = False  # In a checkpoint's recomputation.
    self.pending: list[Any] = []  # The keys of the equation's results.

  # Values ---------------------------------------------------------------

  def key(self, value: Any) -> Any:
    """What computes `value`: an equation and the keys of its inputs, or
    the value itself."""
    found = self.keys.get(id(value))
    if found is not None:
      return found
    self.keep.append(value)
    return ("value", id(value))

  def dep(self, value: Any) -> int:
    return self.deps.get(id(value), 0)

  def set_dep(self, value: Any, bits: int) -> None:
    if bits:
      self.keep.append(value)
      self.deps[id(value)] = self.deps.get(id(value), 0) | bits

  def root(self, value: Any) -> Obj:
    found = self.roots.get(id(value))
    if found is not None:
      return found
    array = constant_array(value)
    if array is not None:
      return Obj(
        consts=frozenset(int(v) for v in array.reshape(-1)), array=array
      )
    self.keep.append(value)
    return Obj(key=id(value))

  def view(self, eqn, operand, out) -> None:
    """`out`, a view of `operand` (a slice, a reshape, ...), names the
    objects the elements it holds name."""
    obj = self.root(operand)
    if obj.consts is not None and obj.array is not None:
      array = apply_view(eqn, obj.array)
      if array is not None:
        consts = frozenset(int(v) for v in array.reshape(-1))
        self.set_root(out, Obj(consts=consts, array=array))
      return
    if obj.key is None:
      return
    dims = (
      eqn.params.get("dimensions") if eqn.primitive.name == "reshape" else None
    )
    if dims is not None and tuple(dims) != tuple(range(len(dims))):
      # A transposed read of a value (``jnp.ravel(order="F")``): XLA makes
      # it a transpose, whose elements the race check does not follow, so
      # neither does this: the view may be any object.
      return
    index = obj.index
    if index is None:
      shape = tuple(eqn.invars[0].aval.shape)
      if not all(isinstance(d, int | np.integer) for d in shape):
        return  # Symbolic: its elements are not followed.
      index = np.arange(int(np.prod(shape))).reshape(shape)
    index = apply_view(eqn, index)
    if index is not None:
      elements = frozenset(int(v) for v in index.reshape(-1))
      self.set_root(out, Obj(key=obj.key, elements=elements, index=index))

  def set_root(self, value: Any, obj: Obj) -> None:
    self.keep.append(value)
    self.roots[id(value)] = obj

  # Evaluation -----------------------------------------------------------

  def run(self, jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list:
    env: dict[Any, Any] = {}

    def read(atom):
      if isinstance(atom, jex_core.Literal):
        return atom.val
      return env[atom]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
      env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
      env[var] = value
    for eqn in jaxpr.eqns:
      invals = [read(atom) for atom in eqn.invars]
      for value in invals:
        self.used.add(id(value))
      in_keys = tuple(
        _literal_key(atom)
        if isinstance(atom, jex_core.Literal)
        else self.key(value)
        for atom, value in zip(eqn.invars, invals, strict=True)
      )
      params = _params_key(eqn.params)
      self.pending = [
        (eqn.primitive.name, params, in_keys, j)
        for j in range(len(eqn.outvars))
      ]
      with jax_compat.equation_context(eqn):
        outs = self.eval_eqn(eqn, invals)
      for var, value, key in zip(eqn.outvars, outs, self.pending, strict=True):
        env[var] = value  # A dropped output's var is never read.
        if id(value) not in self.keys:
          self.keys[id(value)] = key
          self.keep.append(value)
    outs = [read(atom) for atom in jaxpr.outvars]
    for value in outs:
      self.used.add(id(value))
    return outs

  def eval_eqn(self, eqn, invals: list) -> list:
    name = eqn.primitive.name
    native = native_call(eqn, self.decls)
    if native is not None:
      return self.native(eqn, invals, native)
    if name == primitive.entangle_p.name:
      outs = jax_compat.bind_equation(eqn, invals)
      bits = 0
      for value in invals:
        bits |= self.dep(value)
      for value, out in zip(invals, outs, strict=False):  # Payloads first.
        self.set_root(out, self.root(value))
        self.set_dep(out, bits)
      return outs
    if name in VIEWS:
      outs = self.bind(eqn, invals)
      self.view(eqn, invals[0], outs[0])
      return outs
    if not has_native(eqn, self.decls):
      return self.bind(eqn, invals)
    if name in _CALLS:
      # Inlined; the shardings it was given stay as constraints.
      closed = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
      jaxpr, consts = _open(closed)
      invals = _constrained(invals, eqn.params.get("in_shardings"))
      outs = self.run(jaxpr, consts, invals)
      return _constrained(outs, eqn.params.get("out_shardings"))
    if name == "scan":
      return self.scan(eqn, invals)
    if name == "while":
      return self.while_loop(eqn, invals)
    if name == "cond":
      return self.cond(eqn, invals)
    if name in _REMAT:
      return self.remat(eqn, invals)
    if name == "shard_map":
      return self.shard_map(eqn, invals)
    if name == "custom_jvp_call":
      return self.custom_jvp(eqn, invals)
    if name == "custom_vjp_call":
      return self.custom_vjp(eqn, invals)
    raise NotImplementedError(
      f"in_program_order: the higher-order primitive `{name}` holds a "
      f"native call ({first_native(eqn, self.decls)}), and in_program_order "
      "cannot order calls inside it. Move the native call out of it, or "
      "order it by hand with entangle_jax.entangle or Resource."
    )

  def bind(self, eqn, invals: list) -> list:
    """Binds `eqn`'s primitive; its results depend on the calls that XLA
    must compute them after (`kept_deps`), never on mere data flow."""
    outs = jax_compat.bind_equation(eqn, invals)
    for out, bits in zip(
      outs, kept_deps(eqn, [self.dep(v) for v in invals]), strict=True
    ):
      self.set_dep(out, bits)
    return outs

  # Native calls ---------------------------------------------------------

  def witnesses_for(self, parts, bits: int) -> tuple[list, int]:
    """The values a call of `parts`, whose operands depend on the calls in
    `bits`, must be entangled with; and the calls they stand for."""
    needed = [
      a
      for a in self.accesses
      if not (a.bit & bits) and conflicts(a.parts, parts, self.decls)
    ]
    # Leave out a call that another needed call is already ordered after.
    covered = 0
    for a in needed:
      covered |= a.deps & ~a.bit
    kept = [a for a in needed if not (a.bit & covered)]
    values, stood = [], 0
    for a in kept:
      if not a.witnesses and not a.warned:
        a.warned = True
        warnings.warn(
          f"in_program_order: the native call `{a.label}` returns no array, "
          "so later native calls cannot be ordered after it. Give it a "
          "result (io_callback's result_shape, an ffi_call result).",
          stacklevel=_stacklevel(),
        )
      values += a.witnesses
      stood |= a.deps
    self.used.update(id(v) for v in values)
    return values, stood

  def native(self, eqn, invals, call: NativeCall) -> list:
    keys = list(self.pending)
    if self.recompute:
      found = [self.saved.get(k) for k in keys]
      if found and all(v is not None for v in found):
        return found  # The result the call made before, not made again.
    invals = list(invals)
    target = call.label
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    parts = tuple(
      p if k is None else dataclasses.replace(p, obj=self.root(invals[k]))
      for p, k in zip(call.parts, call.objects, strict=True)
    )
    object_index = next((k for k in call.objects if k is not None), None)
    parts = self.in_resource(parts, invals, object_index)
    values, stood = self.witnesses_for(parts, bits)
    indices: list[int] = []
    if values:
      indices = _order_operands(invals, call, object_index)
      if not indices and eqn.primitive.name == "debug_callback":
        warnings.warn(
          "in_program_order: a jax.debug.callback with no operand cannot be "
          "ordered after earlier native calls; it runs when XLA runs it.",
          stacklevel=_stacklevel(),
        )
        values = []
      elif not indices:
        if eqn.primitive.name != "ffi_call":
          names.UNORDERABLE_PRIMITIVES.setdefault(
            eqn.primitive.name, f"`{target}` has no operand to order it by"
          )
        raise NotImplementedError(
          f"in_program_order: the native call `{target}` (primitive "
          f"`{eqn.primitive.name}`) has no operand with elements to order "
          "it by, and must run after earlier calls. Give it an operand (the "
          "handle or token it works on), or order it by hand with "
          "entangle_jax.entangle or Resource."
        )
    if values and indices:
      originals = [invals[k] for k in indices]
      tied = entangle(tuple(originals), *values)
      for k, original, new in zip(indices, originals, tied, strict=True):
        invals[k] = new
        self.set_root(new, self.root(original))
      bits |= stood
    outs = self.bind(eqn, invals)
    if self.saving:
      # Saved by the rebuilt checkpoint's policy: never made again.
      outs = [checkpoint_name(o, _SAVED) for o in outs]
    if self.top and not self.recompute:
      for k, out in zip(keys, outs, strict=True):
        self.saved.setdefault(k, out)
    bit = new_bit()
    for out in outs:
      self.set_dep(out, bit | bits)
    for k, back in zip(call.objects, call.returns, strict=True):
      if k is None:
        continue
      obj = self.root(invals[k])
      for r in back:
        if r < len(outs):
          self.set_root(outs[r], obj)
    if call.witnesses is None:
      witnesses = [w for w in outs if _size(w) > 0][:1]
    elif call.returns_nothing:
      witnesses = []  # A call nothing can wait for: warned when needed.
    else:
      witnesses = [outs[i] for i in call.witnesses if _size(outs[i]) > 0]
    access = Access(
      bit,
      parts,
      witnesses,
      bit | bits,
      target,
      side_effect=call.side_effect,
      results=tuple(outs),
    )
    self.keep.extend(outs)
    self.add(access)
    return outs

  def in_resource(self, parts, invals, object_index):
    """`parts` as the race check reads a call made through a ``Resource``
    (its innermost record in the named scopes): the Resource's mode, and a
    named Resource's calls are on the object of that name."""
    found = resource_record(jax_compat.current_name_stack())
    if found is None:
      return parts
    mode, name = found
    index = 0 if object_index is None else object_index
    changed = []
    for p in parts:
      obj = p.obj
      if name is not None:
        base = (
          obj
          if obj is not None
          else (self.root(invals[index]) if index < len(invals) else Obj())
        )
        obj = dataclasses.replace(base, resource=name)
      changed.append(dataclasses.replace(p, mode=mode, obj=obj))
    return tuple(changed)

  def add(self, access: Access) -> None:
    if not self.decls.safe_pairs:
      # An earlier call that this one comes after, on an object this one
      # writes, need not be looked at again: whatever conflicts with it
      # conflicts with this one, which comes after it.
      self.accesses = [
        a
        for a in self.accesses
        if not (a.bit & access.deps and covers(access.parts, a.parts))
      ]
    self.accesses.append(access)
    self.own.append(access)

  def warn_dropped(self, outs: Sequence[Any]) -> None:
    for value in outs:
      self.used.add(id(value))
    for a in self.own:
      writes = any(p.mode == "write" for p in a.parts)
      used = any(id(r) in self.used for r in a.results)
      if writes and not a.side_effect and not used:
        warnings.warn(
          f"in_program_order: the native call `{a.label}` may write, but "
          "nothing uses its results and it is not side-effecting, so XLA "
          "drops it. Use its result, or declare it has_side_effect=True.",
          stacklevel=_stacklevel(),
        )

  # Summaries of sub-programs ---------------------------------------------

  def summary(self, parts, witnesses, deps_in: int, label: str) -> Access:
    bit = new_bit()
    access = Access(bit, tuple(parts), list(witnesses), bit | deps_in, label)
    self.add(access)
    return access

  def child(self, accesses=None) -> Context:
    ctx = Context(self.decls, self.accesses if accesses is None else accesses)
    ctx.roots = dict(self.roots)
    ctx.deps = dict(self.deps)
    ctx.keep = self.keep
    ctx.used = self.used
    ctx.backward = self.backward
    ctx.keys = self.keys
    ctx.saved = self.saved
    ctx.top = False
    ctx.saving = self.saving
    ctx.recompute = self.recompute
    return ctx

  def seed(self, child: Context, inner: Sequence[Any], outer: Sequence[Any]):
    """Inner values of a sub-program stand for `outer` ones."""
    for i, o in zip(inner, outer, strict=True):
      child.set_dep(i, self.dep(o))
      child.set_root(i, self.root(o))
      if i is not o:
        child.keys[id(i)] = self.key(o)

  def sub_parts(self, jaxprs) -> tuple[Part, ...]:
    """What the native calls of `jaxprs` (and their sub-jaxprs) touch,
    objects unknown: used to order a sub-program against the outside."""
    parts = []
    for jaxpr in jaxprs:
      for eqn in all_eqns(jaxpr):
        found = native_call(eqn, self.decls)
        if found is not None:
          for p in found.parts:
            parts.append(Part(p.mode, None, p.target))
    return tuple(dict.fromkeys(parts))

  def order_token(self, parts, aval=None):
    """A value ordered after the earlier calls `parts` conflict with: an
    int32 scalar, or of `aval`, which is then the one witness itself when
    there is one of that type (no entangle)."""
    values, stood = self.witnesses_for(parts, 0)
    token = _token_of(values, aval)
    self.set_dep(token, stood)
    return token

  def exported(self, ctx: Context) -> list:
    """Values that come after every call made in child `ctx`."""
    covered = 0
    for a in ctx.own:
      covered |= a.deps & ~a.bit
    values = []
    for a in ctx.own:
      if not (a.bit & covered):
        values += a.witnesses
    self.used.update(id(v) for v in values)
    return values

  # Control flow ---------------------------------------------------------

  def cond(self, eqn, invals) -> list:
    branches = eqn.params["branches"]
    index, *ops = invals
    parts = self.sub_parts([b.jaxpr for b in branches])
    chained = backward_in([b.jaxpr for b in branches], self.decls)
    chain = self.take_chain() if chained else None

    follows = []  # Per branch traced, the calls its order value follows.

    def branch_fn(closed, aval=None, found=None):
      def fn(*args):
        ctx = self.child()
        ctx.chain = chain
        self.seed(ctx, args, ops)
        jaxpr, consts = _open(closed)
        outs = ctx.run(jaxpr, consts, list(args))
        exported = self.exported(ctx)
        if found is not None:
          found.append([_aval(e) for e in exported])
        else:
          follows.append(_deps_of(ctx, exported))
        return outs, _token_of(exported, aval), ctx.chain

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
    if _is_bool(index):
      outs, token, chain = jax.lax.cond(index, fns[1], fns[0], *ops)
    else:
      outs, token, chain = jax.lax.switch(index, fns, *ops)
    if chained:
      self.chain = chain
    return self.after_sub(
      parts, list(outs), token, invals, "cond", _common(follows)
    )

  def after_sub(self, parts, outs, token, invals, label, deps=0) -> list:
    """Registers a sub-program's calls (`parts`) as one call here, which
    `token` (a value, or a list of values) comes after; as do the calls in
    `deps`, which every branch's `token` is an entangle after. The other
    results depend on nothing (`dependence`): XLA may pass a value through
    a loop or a branch, and drop the rest."""
    del invals
    tokens = list(token) if isinstance(token, list | tuple) else [token]
    access = self.summary(parts, tokens, deps, label)
    for t in tokens:
      self.set_dep(t, access.deps)
    return outs

  def remat(self, eqn, invals) -> list:
    """Rebuilds a checkpoint around its transformed body. Its native
    calls' results are saved (a policy that saves them by name), never
    made again under differentiation: a call made again would see a later
    state. A checkpoint that JAX's differentiation made to recompute
    forward values (``differentiated``, in a differentiated program
    transformed whole) takes the results of the calls made before."""
    params = eqn.params
    jaxpr = params["jaxpr"]
    holder = {}
    chained = backward_in([jaxpr], self.decls)
    recompute = bool(params.get("differentiated", False))

    def fn(chain, *args):
      ctx = self.child()
      ctx.saving = not recompute
      ctx.recompute = ctx.recompute or recompute
      ctx.chain = chain
      self.seed(ctx, args, invals)
      outs = ctx.run(jaxpr, (), list(args))
      holder["parts"] = _own_parts(ctx)
      exported = self.exported(ctx)
      holder["deps"] = _common([ctx.dep(e) for e in exported])
      return outs, exported, ctx.chain

    kwargs = {"prevent_cse": params.get("prevent_cse", True)}
    saving = jax.checkpoint_policies.save_only_these_names(_SAVED)
    if params.get("policy") is not None:
      saving = jax.checkpoint_policies.save_from_both_policies(
        params["policy"], saving
      )
    kwargs["policy"] = saving
    chain = self.take_chain() if chained else None
    outs, exported, chain = jax.checkpoint(fn, **kwargs)(chain, *invals)
    if chained:
      self.chain = chain
    return self.after_sub(
      holder.get("parts", ()),
      list(outs),
      exported,
      invals,
      "checkpoint",
      holder.get("deps", 0),
    )

  def scan(self, eqn, invals) -> list:
    p = eqn.params
    n_consts, n_carry = jax_compat.scan_counts(p)
    consts = invals[:n_consts]
    init = invals[n_consts : n_consts + n_carry]
    xs = invals[n_consts + n_carry :]
    jaxpr, jconsts = _open(p["jaxpr"])
    chained = backward_in([jaxpr], self.decls)

    def body(use_token):
      def fn(carry, x):
        carry, chain = carry
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token, token_deps)
        ctx.chain = chain
        self.seed(ctx, consts, consts)
        outs = ctx.run(jaxpr, jconsts, [*consts, *carry, *x])
        new_carry, ys = outs[:n_carry], outs[n_carry:]
        if use_token:
          new_carry = (new_carry, self.loop_token(ctx, token))
        return (new_carry, ctx.chain), ys

      return fn

    token_deps = 0

    def run_loop(use_token, init_token=None):
      nonlocal token_deps
      token_deps = self.dep(init_token) if use_token else 0
      carry = (init, init_token) if use_token else init
      # The backward chain goes through the loop's carry when its body
      # calls a custom_vjp whose backward pass makes native calls.
      chain = self.take_chain() if chained else None
      (carry, chain), ys = jax.lax.scan(
        body(use_token),
        (carry, chain),
        xs,
        length=p["length"],
        reverse=p["reverse"],
        unroll=p.get("unroll", 1),
      )
      if chained:
        self.chain = chain
      return carry, ys

    def analyse():
      return self.loop_analysis(
        lambda ctx, carry_in, x_in: ctx.run(
          jaxpr, jconsts, [*consts, *carry_in, *x_in]
        )[:n_carry],
        init,
        consts,
        [_placeholder_x(x) for x in xs],
      )

    return self.loop(analyse, run_loop, invals, "scan", split=n_carry)

  def while_loop(self, eqn, invals) -> list:
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, init = (
      invals[:nc],
      invals[nc : nc + nb],
      invals[nc + nb :],
    )
    cjaxpr, cjconsts = _open(p["cond_jaxpr"])
    bjaxpr, bjconsts = _open(p["body_jaxpr"])
    cond_native = has_native_jaxpr(cjaxpr, self.decls)

    def run_loop(use_token, init_token=None):
      token_deps = self.dep(init_token) if use_token else 0

      def cond_fn(carry):
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token, token_deps)
        (pred,) = ctx.run(cjaxpr, cjconsts, [*cconsts, *carry])
        return pred

      def body_fn(carry):
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token, token_deps)
        outs = ctx.run(bjaxpr, bjconsts, [*bconsts, *carry])
        if use_token:
          return outs, self.loop_token(ctx, token)
        return outs

      carry = (list(init), init_token) if use_token else list(init)
      out = jax.lax.while_loop(cond_fn, body_fn, carry)
      return out, []

    def analyse():
      if cond_native:
        return None  # Calls in the condition: order through the token.
      return self.loop_analysis(
        lambda ctx, carry_in, _: ctx.run(
          bjaxpr, bjconsts, [*bconsts, *carry_in]
        ),
        init,
        bconsts,
        [],
      )

    # With calls in the condition there is no analysis of the body: what
    # the loop touches is then the condition's calls and the body's, so
    # that calls after the loop are ordered after the body's writes too.
    return self.loop(
      analyse,
      run_loop,
      invals,
      "while_loop",
      split=len(init),
      extra_jaxprs=[cjaxpr, bjaxpr] if cond_native else [cjaxpr],
    )

  def loop_child(self, token, deps: int = 0) -> Context:
    """A child context whose calls all come after `token`, which comes
    after the calls in `deps`."""
    if token is False or token is None:
      return self.child(accesses=[])
    bit = new_bit()
    prev = Access(bit, (Part("write", None, "previous"),), [token], bit, "")
    ctx = self.child(accesses=[prev])
    ctx.set_dep(token, bit | deps)
    ctx.prev_bit = bit
    return ctx

  def loop_token(self, ctx: Context, token):
    """The order value out of a loop body: after every call of the body
    and after `token`, the value that came in (so that the loop's last
    one comes after the first)."""
    exported = [w for w in self.exported(ctx) if w is not token]
    if not exported:
      return token
    if _deps_of(ctx, exported) & ctx.prev_bit:
      return _token_of(exported, _aval(token), payload=token)
    return entangle(token, *exported)

  def loop_analysis(self, run_body, init, consts, x_avals):
    """Traces the loop body once with no order value; returns its calls'
    parts, and whether the carries alone order every iteration's calls
    after the previous one's and after the calls before the loop."""
    result = {}

    def probe(*flat_in):
      carry_in, x_in = flat_in[: len(init)], flat_in[len(init) :]
      ctx = self.child(accesses=[])
      self.seed(ctx, consts, consts)
      carry_bits = []
      for value in carry_in:
        bit = new_bit()
        carry_bits.append(bit)
        ctx.set_dep(value, bit)
      carry_out = run_body(ctx, list(carry_in), list(x_in))
      result["ctx"] = ctx
      result["carry_bits"] = carry_bits
      result["out_deps"] = [ctx.dep(v) for v in carry_out]
      exported = self.exported(ctx)
      if len(exported) == 1:
        result["aval"] = _aval(exported[0])
      return [jnp.zeros((), jnp.int32)]

    jax.make_jaxpr(probe)(*[_placeholder(v) for v in init], *x_avals)
    self.loop_aval = result.get("aval")
    ctx = result["ctx"]
    own = ctx.own
    parts = tuple(p for a in own for p in a.parts)
    if not own:
      return parts, True, []
    carry_bits, out_deps = result["carry_bits"], result["out_deps"]
    for j in own:
      for a in own:
        if not conflicts(a.parts, j.parts, self.decls):
          continue
        if not any(
          (j.deps & cb) and (od & a.bit)
          for cb, od in zip(carry_bits, out_deps, strict=True)
        ):
          return parts, False, []
      # Before the loop: through the consts, or an initial carry.
      for p in self.accesses:
        if not conflicts(p.parts, j.parts, self.decls):
          continue
        if j.deps & p.bit:
          continue
        if not any(
          (j.deps & cb) and (self.dep(v) & p.bit)
          for cb, v in zip(carry_bits, init, strict=True)
        ):
          return parts, False, []
    # After the loop: the carries must come after every call of the body.
    whole = 0
    for od in out_deps:
      whole |= od
    if any(not (a.bit & whole) for a in own):
      return parts, False, []
    carrying = [k for k, od in enumerate(out_deps) if od & ~_all(carry_bits)]
    return parts, True, carrying

  def loop(self, analyse, run_loop, invals, label, split, extra_jaxprs=()):
    self.loop_aval = None
    analysis = analyse()
    aval = self.loop_aval
    if analysis is not None:
      parts, trusted, carrying = analysis
    else:
      parts, trusted, carrying = (), False, []
    if not trusted or analysis is None:
      # Order through an order value in the carry: of the type of the
      # body's last call's result when one call comes after all others, so
      # that it is that result (no entangle), else an int32 scalar.
      every = self.sub_parts(extra_jaxprs) + parts
      init_token = self.order_token(every or ANY, aval)
      carry, ys = run_loop(True, init_token)
      carry, token = carry
      outs = list(carry) + list(ys)
      # Each body's order value comes after the one that came in
      # (`loop_token`): the last after the first, and what it follows.
      return self.after_sub(
        every or ANY, outs, token, invals, label, self.dep(init_token)
      )
    carry, ys = run_loop(False)
    outs = list(carry) + list(ys)
    if parts:
      witnesses = [carry[k] for k in carrying if _size(carry[k]) > 0]
      access = self.summary(parts, witnesses, 0, label)
      for k in carrying:
        self.set_dep(carry[k], access.deps)
    return outs

  def shard_map(self, eqn, invals) -> list:
    """Rebuilds the shard_map around the transformed body: earlier calls
    come in as a replicated int32 order value, and each device's calls go
    out as one element of an order value sharded over the manual axes."""
    p = eqn.params
    jaxpr, consts = _open(p["jaxpr"])
    mesh = p["mesh"]
    manual = frozenset(p.get("manual_axes", mesh.axis_names))
    axes = tuple(a for a in mesh.axis_names if a in manual)
    parts = self.sub_parts([jaxpr])
    token_in = self.order_token(parts or ANY)
    holder = {}
    # The backward chain comes in replicated and goes out as one element
    # a device, summed: its cotangent reaches every device's backward
    # passes, and what they hand on is summed over the devices.
    chained = backward_in([jaxpr], self.decls)
    chain_in = [self.take_chain()] if chained else []
    spec = jax.sharding.PartitionSpec

    def body(token, *args):
      chain, args = args[: len(chain_in)], args[len(chain_in) :]
      ctx = self.loop_child(token)
      if chained:
        ctx.chain = chain[0]
      outs = ctx.run(jaxpr, consts, list(args))
      holder["parts"] = _own_parts(ctx)
      chain_out = [ctx.chain.reshape((1,))] if chained else []
      return (*outs, self.token_after(ctx).reshape((1,)), *chain_out)

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
    if chained:
      *outs, token, chain = results
      self.chain = chain.sum()
    else:
      *outs, token = results
    return self.after_sub(
      holder.get("parts", ()), list(outs), token, invals, "shard_map"
    )

  # Custom derivatives ---------------------------------------------------

  def custom_jvp(self, eqn, invals) -> list:
    """Rebuilds the custom_jvp around the transformed primal and the
    transformed JVP rule (traced from ``jax.jvp`` of the original call).
    Earlier calls come in as an int32 order value, an argument: a
    custom_jvp may not close over values being differentiated."""
    closed = eqn.params["call_jaxpr"]
    # The JVP rule runs in the primal's place: ordered as its calls are.
    parts = self.sub_parts([closed.jaxpr]) + rule_parts(eqn, self.decls)
    holder = {"parts": parts}
    token_in = self.order_token(parts or ANY)

    def original(*args):
      return jax_compat.bind_equation(eqn, args)

    fn = jax.custom_jvp(self.ordered_primal(closed, invals, holder))

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
      ctx = self.loop_child(token)
      self.seed(ctx, primals, invals)
      outs = ctx.run(rule.jaxpr, rule.consts, [*primals, *tangents])
      holder["parts"] = holder.get("parts", ()) + _own_parts(ctx)
      n = len(outs) // 2
      zero = np.zeros((), jax.dtypes.float0)
      return (outs[:n], self.token_after(ctx)), (outs[n:], zero)

    outs, token = fn(token_in, *invals)
    return self.after_sub(
      holder.get("parts", ()), list(outs), token, invals, "custom_jvp"
    )

  def ordered_primal(self, closed, invals, holder: dict):
    """The primal function of a rebuilt custom_jvp or custom_vjp:
    ``(token, *args) -> (outs, token out)``, its calls ordered after
    `token` and the token out after them; what they touch is added to
    ``holder["parts"]``."""

    def primal(token, *args):
      ctx = self.loop_child(token)
      self.seed(ctx, args, invals)
      jaxpr, consts = _open(closed)
      outs = ctx.run(jaxpr, consts, list(args))
      holder["parts"] = holder.get("parts", ()) + _own_parts(ctx)
      return outs, self.token_after(ctx)

    return primal

  def token_after(self, ctx: Context):
    """An int32 value that comes after every call made in child `ctx`."""
    exported = self.exported(ctx)
    token = jnp.zeros((), jnp.int32)
    return entangle(token, *exported) if exported else token

  def custom_vjp(self, eqn, invals) -> list:
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
    parts = self.sub_parts([closed.jaxpr]) + rule_parts(eqn, self.decls)
    holder = {"parts": parts}
    token_in = self.order_token(parts or ANY)
    backward = backward_parts(eqn, self.decls)
    if backward:
      self.backward.extend(backward)
      chain_in = self.take_chain()

    def original(*args):
      return jax_compat.bind_equation(eqn, args)

    ordered = self.ordered_primal(closed, invals, holder)

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
      ctx = self.loop_child(token)
      self.seed(ctx, args, invals)
      outs = ctx.run(traced.jaxpr, traced.consts, list(args))
      holder["parts"] = holder.get("parts", ()) + _own_parts(ctx)
      token = self.token_after(ctx)
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
      prevs = []
      for value, label in before:
        bit = new_bit()
        prevs.append(Access(bit, ANY, [value], bit, label))
      ctx = self.child(accesses=prevs)
      for value, prev in zip(before, prevs, strict=True):
        ctx.set_dep(value[0], prev.bit)
      flat_in = jax.tree_util.tree_leaves((list(residuals), list(cts)))
      outs = ctx.run(traced.jaxpr, traced.consts, flat_in)
      exported = self.exported(ctx)
      chain_ct = entangle(chain_ct, *exported) if exported else chain_ct
      return (np.zeros((), jax.dtypes.float0), chain_ct, *outs)

    fn.defvjp(fwd, bwd)
    chain = chain_in if backward else jnp.zeros((), jnp.float32)
    outs, token, chain = fn(token_in, chain, *invals)
    if backward:
      self.chain = chain
    return self.after_sub(
      holder.get("parts", ()), list(outs), token, invals, "custom_vjp"
    )

  def take_chain(self):
    """The backward chain here, started (a float32 zero) if it was not."""
    if self.chain is None:
      self.chain = jnp.zeros((), jnp.float32)
    return self.chain

  def link(self, outs: list) -> list:
    """Ties the backward chain to the program's results, when there is
    one: a custom identity on the floating-point results whose backward
    pass starts the chain's cotangent after every forward call the backward
    passes may conflict with. Under ``grad`` the backward passes then run
    after the whole forward program, and (each handing the cotangent on)
    in reverse program order."""
    if self.chain is None:
      return outs
    floats = [
      i
      for i, o in enumerate(outs)
      if jnp.issubdtype(_aval(o).dtype, jnp.inexact)
    ]
    if not floats:
      return outs
    token = self.order_token(tuple(dict.fromkeys(self.backward)))

    @jax.custom_vjp
    def tie(chain, token, *xs):
      del chain, token
      return list(xs)

    def tie_fwd(chain, token, *xs):
      del chain
      return list(xs), token

    def tie_bwd(token, cts):
      start = entangle(jnp.zeros((), jnp.float32), token)
      return (start, np.zeros(np.shape(token), jax.dtypes.float0), *cts)

    tie.defvjp(tie_fwd, tie_bwd)
    tied = tie(self.chain, token, *[outs[i] for i in floats])
    outs = list(outs)
    for i, value in zip(floats, tied, strict=True):
      outs[i] = value
    return outs


def _stacklevel() -> int:
  """The warning's stack level of the first frame outside this module and
  JAX: the user's line that called the transformed function."""
  frame, level = sys._getframe(1), 1
  while frame is not None:
    name = frame.f_globals.get("__name__", "")
    if not name.startswith(("entangle_jax._src.program_order", "jax.")):
      return level
    frame, level = frame.f_back, level + 1
  return 1


def _token_of(values: Sequence[Any], aval, payload=None):
  """A value after all of `values`: the one value itself when it has type
  `aval`, else `payload` (by default zeros of `aval`, or an int32 scalar)
  entangled with them."""
  if aval is not None and len(values) == 1 and _aval(values[0]) == aval:
    return jax.lax.convert_element_type(values[0], aval.dtype)
  if payload is None:
    shape, dtype = (
      (aval.shape, aval.dtype) if aval is not None else ((), "int32")
    )
    payload = jnp.zeros(shape, dtype)
  return entangle(payload, *values) if values else payload


_SAVED = "entangle_jax_native_result"


def _literal_key(atom) -> Any:
  return ("literal", str(atom.aval), repr(atom.val))


def _params_key(params) -> tuple:
  """`params` as a key: a value that cannot be hashed by its identity."""
  items = []
  for name, value in sorted(params.items()):
    try:
      hash(value)
    except TypeError:
      value = ("id", id(value))
    items.append((name, value))
  return tuple(items)


def _deps_of(ctx: Context, values: Sequence[Any]) -> int:
  """The calls an entangle after all of `values` comes after (in `ctx`)."""
  bits = 0
  for v in values:
    bits |= ctx.dep(v)
  return bits


def _common(deps: Sequence[int]) -> int:
  """The calls in every one of `deps` (none when empty)."""
  if not deps:
    return 0
  bits = deps[0]
  for d in deps[1:]:
    bits &= d
  return bits


def _own_parts(ctx: Context) -> tuple[Part, ...]:
  return tuple(p for a in ctx.own for p in a.parts)


def _all(bits: Sequence[int]) -> int:
  total = 0
  for b in bits:
    total |= b
  return total


def _aval(value) -> jax.ShapeDtypeStruct:
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    dtype = jnp.asarray(value).dtype
  return jax.ShapeDtypeStruct(np.shape(value), dtype)


def _placeholder(value):
  aval = _aval(value)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


def _placeholder_x(x):
  aval = _aval(x)
  return jax.ShapeDtypeStruct(aval.shape[1:], aval.dtype)


def _open(closed) -> tuple[Any, Sequence[Any]]:
  if isinstance(closed, jex_core.ClosedJaxpr):
    return closed.jaxpr, closed.consts
  return closed, ()


def _is_bool(value) -> bool:
  return jnp.issubdtype(_aval(value).dtype, jnp.bool_)


def _size(value) -> int:
  return shape_size(np.shape(value))


def _order_operands(invals, call: NativeCall, object_index) -> list[int]:
  """The operands to entangle so that `call` runs after its witnesses:
  those its lowering says every call depends on, else the first with
  elements (its object operand first); [] when none can."""
  if call.order is None:
    return []
  if call.order:
    return [k for k in call.order if _size(invals[k]) > 0]
  candidates = [object_index] if object_index is not None else []
  candidates += range(len(invals))
  for index in candidates:
    if index < len(invals) and _size(invals[index]) > 0:
      return [index]
  return []
