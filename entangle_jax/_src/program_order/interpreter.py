"""The evaluation of a jaxpr that adds the order: `Context` runs each
equation again, entangling native calls with the earlier calls they
conflict with. Every other equation goes to its primitive's rule
(`rules.registry`), which rebuilds a sub-program that holds native calls
with what `Context` shares (child contexts, order values), reading it
through a narrow protocol (`rule_inputs`), and returns what it decided (a
`rule_inputs.RuleResult`), which `Context.keep_books` records: the
evaluation's books (the backward chain, the recorded calls) are set here
only.

`Context` is the evaluator; what it knows of each value is its
`value_table.ValueTable`, the calls it has recorded its
`call_log.CallLog`, and what a host callback's primitive can take to be
ordered by (a carrier operand or result) is that primitive's rule in
`rules.host_callbacks`."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.extend import core as jex_core

from entangle_jax._src import access_marker, jax_compat
from entangle_jax._src.access_marker import Record
from entangle_jax._src.program_order import natives, rule_inputs
from entangle_jax._src.program_order.call_log import CallLog
from entangle_jax._src.program_order.dependence import kept_deps
from entangle_jax._src.program_order.natives import (
  NativeCall,
  eqns_in_scopes,
  first_native,
  has_native,
  native_call,
)
from entangle_jax._src.program_order.rule_inputs import AS_PARENT, ChildStart
from entangle_jax._src.program_order.rules import registry
from entangle_jax._src.program_order.touches import (
  ANY,
  Obj,
  OrderedCall,
  Part,
  only_reads,
)
from entangle_jax._src.program_order.value_table import (
  ValueTable,
  literal_key,
  params_key,
)
from entangle_jax._src.program_order.values import (
  SAVED,
  aval_of,
  entangled,
  scalar_after,
  size,
  token_of,
  waitable,
)
from entangle_jax._src.targets.declaration import Declarations


class Context:
  """One program's evaluation: its values (`values`), the native calls
  made so far (`calls`), and where it stands (the backward chain, the
  named scopes, a checkpoint's saving). A child evaluation of a
  sub-program (`child`) starts from its parent's."""

  def __init__(
    self,
    decls: Declarations,
    accesses: Sequence[OrderedCall] = (),
    keys: bool = True,
    parent: Context | None = None,
  ):
    self.decls = decls
    self.values = ValueTable(keys) if parent is None else parent.values.child()
    self.calls = CallLog(
      decls, accesses, None if parent is None else parent.calls
    )
    # The backward chain: a float32 scalar threaded through every rebuilt
    # custom_vjp whose backward pass makes native calls (None until one
    # does). Its cotangent orders those backward passes (`link`).
    self.chain: Any = None
    # What those backward passes touch, shared with the children.
    self.backward: list[Part] = [] if parent is None else parent.backward
    self.prev_bit = 0  # In a loop body: the call the order value stands for.
    # The named scopes this context's program is traced in, where a rule
    # traces it apart (a branch, a loop body: JAX gives each sub-jaxpr a
    # name stack of its own), so that a call made in a Resource around
    # them is read with the Resource's records (`scopes`).
    self.outer_scopes = ""
    self.eqn_scopes = ""  # Those of the equation being evaluated.
    self.top = parent is None  # Not inside a function traced again.
    self.saving = False  # In a rebuilt checkpoint: native results saved.
    self.recompute = False  # In a checkpoint's recomputation.
    # The keys of the results of the equation being evaluated, read by
    # `native` before anything it calls can evaluate another equation.
    self.pending: list[Any] = []
    # Where a rule collects the parts of every native call made inside it,
    # nested sub-programs included (shard_map's device check), or None.
    self.native_log: list[Part] | None = None

  # What the rules read of the values and the calls ----------------------

  @property
  def accesses(self) -> list[OrderedCall]:
    """The earlier calls a later call may conflict with."""
    return self.calls.accesses

  @property
  def own(self) -> list[OrderedCall]:
    """The calls made in this evaluation (not in a parent's)."""
    return self.calls.own

  def dep(self, value: Any) -> int:
    """The calls `value` comes after (`ValueTable.dep`)."""
    return self.values.dep(value)

  def set_dep(self, value: Any, bits: int) -> None:
    """Records that `value` comes after the calls in `bits` too."""
    self.values.set_dep(value, bits)

  def root(self, value: Any) -> Obj:
    """The object `value` names (`ValueTable.root`)."""
    return self.values.root(value)

  def set_root(self, value: Any, obj: Obj) -> None:
    """Records that `value` names `obj`."""
    self.values.set_root(value, obj)

  def view(self, eqn, operand, out) -> None:
    """Records that `out`, a view of `operand`, names what its elements
    name (`ValueTable.view`)."""
    self.values.view(eqn, operand, out)

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
    table = self.values
    used = table.used
    program_used = table.program_used
    keep = table.keep
    keys = table.keys
    for eqn in jaxpr.eqns:
      invals = [read(atom) for atom in eqn.invars]
      used.update(map(id, invals))
      program_used.update(map(id, invals))
      if not table.track_keys:
        self.pending = []
        with jax_compat.equation_context(eqn):
          outs = self.eval_eqn(eqn, invals)
        for var, value in zip(eqn.outvars, outs, strict=True):
          env[var] = value
        # Kept to the end, as keyed values are: the tables here know a
        # value by its id, which a value freed early would hand on.
        keep.extend(outs)
        continue
      in_keys = tuple(
        literal_key(atom)
        if isinstance(atom, jex_core.Literal)
        else table.key(value)
        for atom, value in zip(eqn.invars, invals, strict=True)
      )
      params = params_key(eqn.params)
      # Kept here as well as on `self`: a rule that runs a sub-program
      # (a jitted step) sets `self.pending` for each inner equation.
      pending = [
        (eqn.primitive.name, params, in_keys, j)
        for j in range(len(eqn.outvars))
      ]
      self.pending = pending
      with jax_compat.equation_context(eqn):
        outs = self.eval_eqn(eqn, invals)
      for var, value, key in zip(eqn.outvars, outs, pending, strict=True):
        env[var] = value  # A dropped output's var is never read.
        if id(value) not in keys:
          keys[id(value)] = key
          keep.append(value)
    outs = [read(atom) for atom in jaxpr.outvars]
    for value in outs:
      used.add(id(value))
      program_used.add(id(value))
    return outs

  def eval_eqn(self, eqn, invals: list) -> list:
    """Evaluates `eqn` by its primitive's rule (`rules.registry`): a native
    call is ordered; a first-order rule (entangle, views) always applies; a
    sub-program rule only where the equation holds a native call, which a
    primitive with no rule cannot hold."""
    # In full, as the module will record them: a Resource's records
    # decide what a call made through it touches.
    scopes = self.eqn_scopes = self.scopes()
    native = native_call(eqn, self.decls, scopes)
    if native is not None:
      return self.native(eqn, invals, native)
    name = eqn.primitive.name
    rule = registry.rule_for(name)
    if rule is not None and not rule.higher_order:
      return self.keep_books(rule.apply(self, eqn, invals))
    if not has_native(eqn, self.decls, scopes):
      return self.bind(eqn, invals)
    if rule is None:
      raise NotImplementedError(
        f"in_program_order: the higher-order primitive `{name}` holds a "
        f"native call ({first_native(eqn, self.decls, scopes)}), and "
        "in_program_order "
        "cannot order calls inside it. Move the native call out of it, or "
        "order it by hand with entangle_jax.entangle or Resource."
      )
    return self.keep_books(rule.apply(self, eqn, invals))

  def bind(self, eqn, invals: list) -> list:
    """Binds `eqn`'s primitive; its results depend on the calls that XLA
    must compute them after (`kept_deps`), never on mere data flow."""
    outs = jax_compat.bind_equation(eqn, invals)
    table = self.values
    flows = [table.flows(v) for v in invals]
    for out, bits in zip(
      outs, kept_deps(eqn, [table.dep(v) for v in invals], flows), strict=True
    ):
      table.set_dep(out, bits)
      if not bits and any(flows):
        table.taint(out)
    return outs

  # Native calls ---------------------------------------------------------

  def witnesses_for(
    self, parts, bits: int, later: str = "a later native call"
  ) -> tuple[list, int]:
    """The values a call of `parts`, whose operands depend on the calls in
    `bits`, must be entangled with, noted as used; and the calls they
    stand for (`CallLog.witnesses_for`)."""
    values, stood = self.calls.witnesses_for(parts, bits, later)
    self.values.used.update(id(v) for v in values)
    return values, stood

  def native(self, eqn, invals, call: NativeCall) -> list:
    """Binds `eqn`, the native call `call`, after the earlier calls it
    conflicts with, and records it."""
    keys = list(self.pending)
    table = self.values
    if self.recompute:
      site = jax_compat.call_site(eqn)
      found = [table.saved_for(k, site) for k in keys]
      if found and all(v is not None for v in found):
        return found  # The result the call made before, not made again.
    invals = list(invals)
    if call.objects and all(
      k is not None and size(invals[k]) == 0 for k in call.objects
    ):
      # Its object operand holds no element (a handle array sliced to
      # nothing, as ``associative_scan`` hands its combine function): it
      # names no object, so the call touches none, and XLA keeps no such
      # call in the module to race. Nothing to order, nothing to wait for.
      return self.bind(eqn, invals)
    parts, scope, bits, tokens, object_index = _touched(self, eqn, invals, call)
    values, stood = self.witnesses_for(
      parts, bits, f"the native call `{call.label}`"
    )
    # A host callback may take a carrier (`rules.host_callbacks`): one
    # more result, so that later calls can wait for it, and one more
    # operand, to be ordered by, where it has none with elements.
    carrier = registry.carrier_for(eqn.primitive.name)
    adds_result = carrier is not None and carrier.adds_result(eqn)
    adds_operand = False
    indices: list[int] = []
    if values:
      indices = _order_operands(invals, call, object_index)
      if not indices:
        adds_operand = _takes_carrier(eqn, carrier, call.label)
        if adds_operand:
          invals.append(jnp.zeros((), jnp.int32))
          indices = [len(invals) - 1]
        else:
          values = []
    if values and indices:
      _tie_operands(self, invals, indices, values, stood, parts)
      bits |= stood
    with scope:
      if carrier is not None and (adds_result or adds_operand):
        outs = carrier.bind(eqn, invals, adds_operand, adds_result)
      else:
        outs = self.bind(self.ordered_bodies(eqn), invals)
    return _recorded(self, eqn, call, keys, invals, outs, parts, bits, tokens)

  def ordered_bodies(self, eqn):
    """`eqn`, a binding's own higher-order primitive, with each sub-program
    parameter (a ``ClosedJaxpr``) that makes native calls replaced by the
    same program in program order: its calls among themselves. Against
    the calls outside, `native` orders the equation as one call. Any
    other equation is returned as it is."""
    if not any(True for _ in natives.sub_jaxprs(eqn)):
      return eqn
    changed = {}
    scopes = self.scopes()
    for key, value in eqn.params.items():
      items = value if isinstance(value, tuple | list) else (value,)
      new = [_ordered_closed(self.decls, scopes, item) for item in items]
      if any(n is not i for n, i in zip(new, items, strict=True)):
        if hasattr(value, "_make"):  # A named tuple (custom_linear_solve's).
          changed[key] = value._make(new)
        elif isinstance(value, tuple | list):
          changed[key] = type(value)(new)
        else:
          changed[key] = new[0]
    if not changed:
      return eqn
    return eqn.replace(params={**eqn.params, **changed})

  def warn_dropped(self, outs: Sequence[Any]) -> None:
    """Warns of each native call that may write, has no side effect, and
    that nothing keeps, `outs` being the program's results
    (`CallLog.warn_dropped`)."""
    for value in outs:
      self.values.used.add(id(value))
      self.values.program_used.add(id(value))
    self.calls.warn_dropped(self.values.program_used)

  # Sub-programs: what the rules (`rules`) share --------------------------

  def mark(self, value: Any) -> int:
    """A new call's bit, which `value` comes after from now on (a loop
    body's probe of which carries its calls come after)."""
    bit = self.calls.new_bit()
    self.values.set_dep(value, bit)
    return bit

  def keep_books(self, result: rule_inputs.RuleResult) -> list:
    """Records what a rule decided (`rule_inputs.RuleResult`) and returns
    its outputs. The rule only returns it: the chain, the recorded calls
    and what the backward passes touch are set here, in one place."""
    if result.chain is not None:
      self.chain = result.chain
    if result.backward:
      # In place: a child shares its parent's list (`child`), and the
      # backward passes' parts are read once, at the end (`link`).
      self.backward.extend(result.backward)
    summary = result.summary
    if summary is not None:
      # Its witnesses, and the values it names, come after the sub-program's
      # calls recorded as one, and after the calls of its `deps`.
      access = self.calls.record(summary)
      for value in summary.after:
        self.values.set_dep(value, access.deps)
    return result.outs

  def child(self, start: ChildStart = AS_PARENT) -> Context:
    """A child evaluation of a sub-program, set up as `start` says
    (`rule_inputs.ChildStart`): a rule says how its sub-program starts,
    and the child is set up here, so no rule sets another's attributes."""
    after, deps = start.after, start.deps
    # False where a loop's rule has no order value in the carry.
    ordered = after is not None and after is not False
    prevs = _earlier_calls(self.calls, start, ordered)
    ctx = Context(self.decls, prevs, self.values.track_keys, parent=self)
    ctx.saving = self.saving if start.saving is None else start.saving
    ctx.recompute = self.recompute or start.recompute
    ctx.native_log = [] if start.log else self.native_log
    ctx.chain = start.chain
    # A rule makes its children while it evaluates an equation, and may
    # make them inside the sub-program's own trace, whose name stack
    # starts anew: the equation's scopes are theirs.
    ctx.outer_scopes = self.eqn_scopes or self.scopes()
    if ordered:
      ctx.values.set_dep(after, prevs[0].bit | deps)
      ctx.prev_bit = prevs[0].bit
    elif start.earlier is not None:
      for (value, _), prev in zip(start.earlier, prevs, strict=True):
        ctx.values.set_dep(value, prev.bit)
    self.values.seed(ctx.values, *start.seed)
    return ctx

  def scopes(self) -> str:
    """The named scopes in effect, in full: those of the trace now, inside
    those this context's program was traced in (`outer_scopes`)."""
    current = jax_compat.current_name_stack()
    outer = self.outer_scopes
    if not outer or current.startswith(outer):
      return current
    return f"{outer}/{current}" if current else outer

  def sub_parts(self, jaxprs) -> tuple[Part, ...]:
    """What the native calls of `jaxprs` (and their sub-jaxprs) touch,
    objects unknown: used to order a sub-program against the outside."""
    parts = []
    scopes = self.scopes()
    for jaxpr in jaxprs:
      for eqn, full in eqns_in_scopes(jaxpr, scopes):
        found = native_call(eqn, self.decls, full)
        if found is not None:
          for p in found.parts:
            parts.append(Part(p.mode, None, p.target))
    return tuple(dict.fromkeys(parts))

  def order_token(self, parts, aval=None):
    """A value ordered after the earlier calls `parts` conflict with: an
    int32 scalar, or of `aval`, which is then the one witness itself when
    there is one of that type (no entangle)."""
    values, stood = self.witnesses_for(
      parts, 0, "a sub-program (a loop, a branch, a backward pass)"
    )
    token = token_of(values, aval)
    self.values.set_dep(token, stood)
    return token

  def exported(self) -> list:
    """Values that come after every call made in this evaluation (not in
    its parent): noted as used, in the set a child shares with its
    parent."""
    values = self.calls.exported()
    self.values.used.update(id(v) for v in values)
    # A token (of a call that returns only one) is no value a branch or a
    # loop body can hand out as its order value: an int32 scalar entangled
    # after it is, and comes after the same calls.
    return [
      _after_token(self.values, v) if jax_compat.is_token(v) else v
      for v in values
    ]

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
      if jnp.issubdtype(aval_of(o).dtype, jnp.inexact)
    ]
    if not floats:
      return outs
    # The chain's cotangent starts after the forward calls the backward
    # passes conflict with: one of them converted, or an entangle after
    # them (`scalar_after`), taken by the backward pass as it is.
    values, stood = self.witnesses_for(
      tuple(dict.fromkeys(self.backward)),
      0,
      "a sub-program (a loop, a branch, a backward pass)",
    )
    token = scalar_after(values, jnp.zeros((), jnp.float32))
    self.values.set_dep(token, stood)
    tied = _tie(self.chain, token, [outs[i] for i in floats])
    outs = list(outs)
    for i, value in zip(floats, tied, strict=True):
      outs[i] = value
    return outs


def _touched(ctx: Context, eqn, invals: list, call: NativeCall):
  """What native call `eqn` (`call`) on `invals` touches, as the race check
  reads it (`_in_resource`), and the named scope to bind it in; the calls
  it comes after by its operands and its ordered effects; those effects;
  and its object operand's index (None: none)."""
  table = ctx.values
  bits = 0
  for value in invals:
    bits |= table.dep(value)
  # An ordered effect is an order: this call comes after the earlier
  # ones with one of its ordered effects, with no entangle (and no
  # warning for one that returns no array).
  tokens = jax_compat.ordered_effects_of(eqn)
  if tokens:
    bits |= ctx.calls.after_effects(tokens)
  parts = tuple(
    p if k is None else Part(p.mode, table.root(invals[k]), p.target)
    for p, k in zip(call.parts, call.objects, strict=True)
  )
  object_index = next((k for k in call.objects if k is not None), None)
  parts, scope = _in_resource(table, parts, invals, object_index, call.record)
  if ctx.native_log is not None:
    ctx.native_log.extend(parts)
  return parts, scope, bits, tokens, object_index


def _recorded(
  ctx: Context, eqn, call: NativeCall, keys, invals, outs, parts, bits, tokens
) -> list:
  """Records native call `eqn` (`call`), bound on `invals` to `outs` (a
  carrier result last, past `eqn`'s own), which touches `parts` and comes
  after the calls in `bits`. Its results, less the carrier result, saved
  by `keys` (what computes each) for a checkpoint's recomputation."""
  table = ctx.values
  extra = outs[len(eqn.outvars) :]
  outs = outs[: len(eqn.outvars)]
  if ctx.saving:
    # Saved by the rebuilt checkpoint's policy: never made again.
    outs = [checkpoint_name(o, SAVED) for o in outs]
  if ctx.top and not ctx.recompute and table.track_keys:
    site = jax_compat.call_site(eqn)
    for k, out in zip(keys, outs, strict=True):
      table.save(k, site, out)
  bit = ctx.calls.new_bit()
  for out in outs:
    table.set_dep(out, bit | bits)
  for k, back in zip(call.objects, call.returns, strict=True):
    if k is not None:
      obj = table.root(invals[k])
      for r in back:
        if r < len(outs):
          table.set_root(outs[r], obj)
  access = OrderedCall(
    bit,
    parts,
    _witnesses_of(call, outs, extra),
    bit | bits,
    call.label,
    side_effect=call.side_effect,
    results=tuple(outs),
    tokens=tokens,
  )
  table.keep.extend(outs)
  table.keep.extend(extra)
  ctx.calls.add(access)
  return outs


def _tie(chain, token, xs: list) -> list:
  """`xs` through a custom identity whose backward pass hands `token` on
  as the cotangent of `chain` (`Context.link`)."""

  @jax.custom_vjp
  def tie(chain, token, *xs):
    del chain, token
    return list(xs)

  def tie_fwd(chain, token, *xs):
    del chain
    return list(xs), token

  def tie_bwd(token, cts):
    # `token` depends on no input being differentiated: its cotangent
    # is a zero that JAX drops.
    return (token, jnp.zeros_like(token), *cts)

  tie.defvjp(tie_fwd, tie_bwd)
  return tie(chain, token, *xs)


def _earlier_calls(
  calls: CallLog, start: ChildStart, ordered: bool
) -> list[OrderedCall]:
  """The earlier calls of a child evaluation started as `start` says
  (`ordered`: from an order value, `start.after`)."""
  if ordered:
    # One call the order value `after` stands for: every call of the
    # child comes after it, and so after the calls in `deps`.
    prev_bit = calls.new_bit()
    return [
      OrderedCall(
        prev_bit,
        (Part("write", None, "previous"),),
        [start.after],
        prev_bit,
        "",
      )
    ]
  if start.earlier is not None:
    # Each a call on any object, which its value stands for (a backward
    # pass after the forward pass's calls, and after later calls').
    prevs = []
    for value, label in start.earlier:
      bit = calls.new_bit()
      prevs.append(OrderedCall(bit, ANY, [value], bit, label))
    return prevs
  return calls.accesses


def _ordered_closed(decls: Declarations, scopes: str, item):
  """`item`, a sub-program parameter of a binding's own primitive, in
  program order (`Context.ordered_bodies`) when it is a ``ClosedJaxpr``
  that makes native calls; else `item` itself."""
  if not isinstance(item, jex_core.ClosedJaxpr):
    return item
  if not natives.has_native_jaxpr(item.jaxpr, decls, scopes=scopes):
    return item

  def body(*args):
    inner = Context(decls)
    inner.outer_scopes = scopes
    outs = inner.run(item.jaxpr, item.consts, list(args))
    inner.warn_dropped(outs)
    return outs

  avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in item.in_avals]
  return jax.make_jaxpr(body)(*avals)


def _takes_carrier(eqn, carrier: registry.CarrierRule | None, label: str):
  """Whether native call `eqn` (`label`), with no operand with elements
  and earlier calls to come after, takes a carrier operand (its
  primitive's rule, `carrier`, says so). False where it runs unordered,
  as its rule warns; raises where it has no rule."""
  if carrier is not None and carrier.takes_operand(eqn):
    return True
  if carrier is not None and carrier.unordered is not None:
    warnings.warn(carrier.unordered, stacklevel=natives.user_stacklevel())
    return False
  raise NotImplementedError(
    f"in_program_order: the native call `{label}` (primitive "
    f"`{eqn.primitive.name}`) has no operand with elements to order "
    "it by, and must run after earlier calls (an operand of no "
    "element orders nothing: XLA replaces it by a constant). Give it "
    "an operand with elements (the handle or token it works on), or "
    "order it by hand with entangle_jax.entangle on such an operand, "
    "or Resource."
  )


def _witnesses_of(call: NativeCall, outs: list, extra: list) -> list:
  """What a later call waits for to come after native call `call`, whose
  results are `outs`, and `extra` the carrier result it was given
  (`rules.host_callbacks`). A token result is a witness as an array is
  (issue 70): a binding whose call returns only a token is waited for
  through it."""
  if extra:
    return extra
  if call.witnesses is None:
    return [w for w in outs if waitable(w)][:1]
  if call.returns_nothing:
    return []  # A call nothing can wait for: warned when needed.
  return [outs[i] for i in call.witnesses if waitable(outs[i])]


def _after_token(table: ValueTable, token) -> Any:
  """An int32 scalar after `token`, which comes after what it does."""
  (after,) = entangled([jnp.zeros((), jnp.int32)], [token])
  table.set_dep(after, table.dep(token))
  table.keep.append(after)
  return after


def _tie_operands(
  ctx: Context, invals, indices, values, stood: int, parts
) -> None:
  """Replaces the operands at `indices` of `invals` by the same values
  entangled after `values` (which stand for the calls `stood`): one
  view of a handle array shared by the reads after the same calls
  (`ValueTable.shared_read`), else each operand its own."""
  table = ctx.values
  originals = [invals[k] for k in indices]
  shared = (
    table.shared_read(originals[0], values, stood, ctx.bind)
    if len(indices) == 1 and only_reads(parts)
    else None
  )
  tied = [shared] if shared is not None else entangled(originals, values)
  for k, original, new in zip(indices, originals, tied, strict=True):
    invals[k] = new
    table.set_root(new, table.root(original))


def _in_resource(
  table: ValueTable, parts, invals, object_index, record: Record | None
):
  """`parts` as the race check reads a call made through a ``Resource``
  (`record`, its innermost record in the named scopes, as the access
  policy read it for `natives.native_call`): the Resource's mode, and a
  named Resource's calls are on the object of that name; and the named
  scope to bind the call in.

  A call on a named argument (`ValueTable.name_arguments`) made outside any
  ``Resource`` is bound in a scope that records the argument's name, as
  a named ``Resource``'s is, so that the race check tells the calls on
  two arguments apart as this does. A call whose parts name two
  arguments cannot be recorded so: its parts lose their names, and it
  is ordered as one on any object those values may be.
  """
  if record is None:
    return _argument_scope(parts)
  mode, name = record.mode, record.resource
  index = 0 if object_index is None else object_index
  changed = []
  for p in parts:
    obj = p.obj
    if name is not None:
      base = (
        obj
        if obj is not None
        else (table.root(invals[index]) if index < len(invals) else Obj())
      )
      obj = dataclasses.replace(base, resource=name)
    elif obj is not None:
      # An unnamed Resource: the check reads no name, so neither does
      # this (an argument's name included).
      obj = dataclasses.replace(obj, resource=None)
    changed.append(dataclasses.replace(p, mode=mode, obj=obj))
  return tuple(changed), contextlib.nullcontext()


def _every_rule_input(
  ctx: Context,
) -> tuple[
  rule_inputs.Values,
  rule_inputs.NativeCalls,
  rule_inputs.Inlined,
  rule_inputs.SubPrograms,
  rule_inputs.ChainedSubPrograms,
  rule_inputs.Checkpoint,
  rule_inputs.Loop,
  rule_inputs.ShardMap,
  rule_inputs.SubEvaluation,
]:
  """`ctx` as each rule's input: never called; ty checks that `Context`
  has what every protocol of `rule_inputs` names, as the rules it hands
  itself to (`Context.eval_eqn`) read it."""
  return ctx, ctx, ctx, ctx, ctx, ctx, ctx, ctx, ctx


def _order_operands(invals, call: NativeCall, object_index) -> list[int]:
  """The operands to entangle so that `call` runs after its witnesses:
  those its lowering says every call depends on, else the first with
  elements (its object operand first); [] when none can."""
  if call.order is None:
    return []
  if call.order:
    return [k for k in call.order if size(invals[k]) > 0]
  candidates = [object_index] if object_index is not None else []
  candidates += range(len(invals))
  for index in candidates:
    if index < len(invals) and size(invals[index]) > 0:
      return [index]
  return []


def _argument_scope(parts):
  """`parts` of a call made outside any ``Resource``, and the named scope
  that records the argument it is on (see `_in_resource`)."""
  labels = {p.obj.resource for p in parts if p.obj is not None}
  labels.discard(None)
  if not labels:
    return parts, contextlib.nullcontext()
  if len(labels) > 1 or any(p.obj is None for p in parts):
    unnamed = tuple(
      p
      if p.obj is None
      else dataclasses.replace(p, obj=dataclasses.replace(p.obj, resource=None))
      for p in parts
    )
    return unnamed, contextlib.nullcontext()
  (label,) = labels
  mode = "write" if any(p.mode == "write" for p in parts) else "read"
  record = access_marker.scope_component(mode, label)
  return parts, jax.named_scope(record)
