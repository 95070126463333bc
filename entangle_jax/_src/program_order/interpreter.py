"""The evaluation of a jaxpr that adds the order: `Context` runs each
equation again, entangling native calls with the earlier calls they
conflict with. Every other equation goes to its primitive's rule
(`rules.registry`), which rebuilds a sub-program that holds native calls
with what `Context` shares (child contexts, order values), reading it
through a narrow protocol (`rule_inputs`), and returns what it decided (a
`rule_inputs.RuleResult`), which `Context.keep_books` records: the
evaluation's books (the backward chain, the recorded calls) are set here
only."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.core import ShapedArray
from jax.extend import core as jex_core

from entangle_jax._src import access_marker, jax_compat
from entangle_jax._src.access_marker import Record
from entangle_jax._src.program_order import natives, rule_inputs
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
  apply_view,
  comes_after,
  conflicts,
  constant_array,
  constants_of,
  covers,
  may_conflict,
  only_reads,
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
from entangle_jax._src.targets.names import DEBUG_CALLBACK_PRIMITIVES


class Context:
  """One program's evaluation: the native calls made so far, and for each
  value the calls it depends on and the object it names."""

  def __init__(
    self,
    decls: Declarations,
    accesses: Sequence[OrderedCall] = (),
    keys: bool = True,
  ):
    self.decls = decls
    # Whether values are keyed by what computes them (`keys`, `key`): only
    # a checkpoint that JAX's differentiation recomputes reads the keys,
    # and computing them for every equation of a long program costs as
    # much as the bookkeeping of its native calls.
    self.track_keys = keys
    self.accesses: list[OrderedCall] = list(accesses)
    # Those of `accesses` that write: all a call that only reads can
    # conflict with (`candidates`), so that reads of what one write wrote
    # are not each compared with all the reads before them.
    self.writing: list[OrderedCall] = [
      a for a in self.accesses if not a.only_reads
    ]
    # `accesses` by the constant handles they name, for `candidates`: every
    # access ever added (`log`), the positions in it of those whose parts
    # all name constants, by constant, and of the others; and the bits of
    # those still in `accesses`.
    self.log: list[OrderedCall] = []
    self.by_const: dict[int, list[int]] = {}
    self.loose: list[int] = []
    self.live: set[int] = set()  # The ids of those of `log` still recorded.
    # The bits that stand for calls, counted from 0 for each evaluation
    # and shared by its children: a set of calls is an int as wide as the
    # calls made in this one evaluation, not in every one in the process.
    self.bit_counter = itertools.count()
    for a in self.accesses:
      self.index(a)
    self.own: list[OrderedCall] = []  # Made in this context.
    # A view of a traced handle array (``slots[3]``): the view's equation
    # and the value it views, by the view's id; and, for calls that only
    # read, the handle arrays already entangled after a set of witnesses
    # (`_read_operand`).
    self.viewed_from: dict[int, tuple[Any, Any]] = {}
    # What each view of an object names (`view`), and the views of an
    # entangled handle array already bound (`_read_operand`).
    self.views: dict[Any, tuple[Any, Obj | None]] = {}
    self.constants: dict[Any, Obj] = {}  # By value (`root`).
    self.rebound: dict[Any, Any] = {}
    self.entangled_roots: dict[tuple[int, tuple[int, ...]], Any] = {}
    self.deps: dict[int, int] = {}
    self.roots: dict[int, Obj] = {}
    self.used: set[int] = set()
    # What the program itself uses (the equations' operands and the
    # jaxprs' outputs), not the witnesses the transform adds; and every
    # call recorded in this evaluation and its children (branches, loop
    # bodies, helpers), in the order they were made.
    self.program_used: set[int] = set()
    self.every_call: list[OrderedCall] = []
    self.keep: list[Any] = []
    # The backward chain: a float32 scalar threaded through every rebuilt
    # custom_vjp whose backward pass makes native calls (None until one
    # does). Its cotangent orders those backward passes (`link`).
    self.chain: Any = None
    self.backward: list[Part] = []  # What those backward passes touch.
    self.prev_bit = 0  # In a loop body: the call the order value stands for.
    # The named scopes this context's program is traced in, where a rule
    # traces it apart (a branch, a loop body: JAX gives each sub-jaxpr a
    # name stack of its own), so that a call made in a Resource around
    # them is read with the Resource's records (`scopes`).
    self.outer_scopes = ""
    self.eqn_scopes = ""  # Those of the equation being evaluated.
    # Native results by what computes them (`_key`), for a checkpoint that
    # JAX's differentiation recomputes (`remat`): it takes the result saved
    # here, since a native call made again would see a later state.
    self.keys: dict[int, Any] = {}
    self.saved: dict[Any, Any] = {}
    self.top = True  # Not inside a function traced again (a loop body ...).
    self.saving = False  # In a rebuilt checkpoint: native results saved.
    self.recompute = False  # In a checkpoint's recomputation.
    # The keys of the results of the equation being evaluated, read by
    # `native` before anything it calls can evaluate another equation.
    self.pending: list[Any] = []
    # Where a rule collects the parts of every native call made inside it,
    # nested sub-programs included (shard_map's device check), or None.
    self.native_log: list[Part] | None = None

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
      # One object for each constant's value: a program names its handles
      # by a few constants thousands of times.
      key = (array.dtype.str, array.shape, array.tobytes())
      obj = self.constants.get(key)
      if obj is None:
        obj = self.constants[key] = Obj(
          consts=frozenset(int(v) for v in array.reshape(-1)), array=array
        )
      return obj
    self.keep.append(value)
    return Obj(key=id(value))

  def view(self, eqn, operand, out) -> None:
    """`out`, a view of `operand` (a slice, a reshape, ...), names the
    objects the elements it holds name."""
    obj = self.root(operand)
    held = obj.array if obj.consts is not None else obj.index
    key = (
      obj,
      id(held),
      tuple(eqn.invars[0].aval.shape),
      eqn.primitive,
      _params_key(eqn.params),
    )
    cached = self.views.get(key)
    if cached is not None and cached[0] is held:
      found = cached[1]
    else:
      # Computed once for each view of one object (a read of
      # ``slots[k % 64]`` 5,000 times takes 64 slices).
      found = self._view_obj(eqn, obj)
      self.views[key] = (held, found)
    if found is None:
      return
    self.set_root(out, found)
    if found.key is not None and len(eqn.invars) == 1 and len(eqn.outvars) == 1:
      self.viewed_from[id(out)] = (eqn, operand)

  def _view_obj(self, eqn, obj: Obj) -> Obj | None:
    """What a view `eqn` of an operand naming `obj` names, or None: nothing
    followed."""
    if obj.consts is not None and obj.array is not None:
      array = apply_view(eqn, obj.array)
      if array is None:
        return None
      consts = frozenset(int(v) for v in array.reshape(-1))
      return Obj(consts=consts, array=array, resource=obj.resource)
    if obj.key is None:
      return None
    dims = (
      eqn.params.get("dimensions") if eqn.primitive.name == "reshape" else None
    )
    if dims is not None and tuple(dims) != tuple(range(len(dims))):
      # A transposed read of a value (``jnp.ravel(order="F")``): XLA makes
      # it a transpose, whose elements the race check does not follow, so
      # neither does this: the view may be any object.
      return None
    index = obj.index
    if index is None:
      shape = tuple(eqn.invars[0].aval.shape)
      if not all(isinstance(d, int | np.integer) for d in shape):
        return None  # Symbolic: its elements are not followed.
      index = np.arange(int(np.prod(shape))).reshape(shape)
    index = apply_view(eqn, index)
    if index is None:
      return None
    elements = frozenset(int(v) for v in index.reshape(-1))
    return Obj(
      key=obj.key, elements=elements, index=index, resource=obj.resource
    )

  def name_arguments(self, values: Sequence[Any], labels: Sequence[str]):
    """The caller's word that `values` (the traced arguments) hold
    different objects: each is named by its label (``args[0]``) as a named
    ``Resource`` is, so calls on two of them are not ordered. A call on
    one is made under its name (`named_scope`), so the race check reads
    the same word."""
    named: set[int] = set()
    for value, label in zip(values, labels, strict=True):
      if id(value) not in named:  # One value passed twice: one object.
        named.add(id(value))
        obj = dataclasses.replace(self.root(value), resource=label)
        self.set_root(value, obj)

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
    used = self.used
    program_used = self.program_used
    for eqn in jaxpr.eqns:
      invals = [read(atom) for atom in eqn.invars]
      used.update(map(id, invals))
      program_used.update(map(id, invals))
      if not self.track_keys:
        self.pending = []
        with jax_compat.equation_context(eqn):
          outs = self.eval_eqn(eqn, invals)
        for var, value in zip(eqn.outvars, outs, strict=True):
          env[var] = value
        # Kept to the end, as keyed values are: the tables here know a
        # value by its id, which a value freed early would hand on.
        self.keep.extend(outs)
        continue
      in_keys = tuple(
        _literal_key(atom)
        if isinstance(atom, jex_core.Literal)
        else self.key(value)
        for atom, value in zip(eqn.invars, invals, strict=True)
      )
      params = _params_key(eqn.params)
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
        if id(value) not in self.keys:
          self.keys[id(value)] = key
          self.keep.append(value)
    outs = [read(atom) for atom in jaxpr.outvars]
    for value in outs:
      self.used.add(id(value))
      self.program_used.add(id(value))
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
    for out, bits in zip(
      outs, kept_deps(eqn, [self.dep(v) for v in invals]), strict=True
    ):
      self.set_dep(out, bits)
    return outs

  # Native calls ---------------------------------------------------------

  def witnesses_for(
    self, parts, bits: int, later: str = "a later native call"
  ) -> tuple[list, int]:
    """The values a call of `parts`, whose operands depend on the calls in
    `bits`, must be entangled with; and the calls they stand for. `later`
    names that call for the warning when an earlier call it must follow
    returns no array."""
    reads, consts = only_reads(parts), constants_of(parts)
    needed = [
      a
      for a in self.candidates(consts, reads)
      if not comes_after(bits, a)
      and may_conflict(a, parts, reads, consts)
      and conflicts(a.parts, parts, self.decls)
    ]
    kept = _not_covered(needed)
    values, stood, unwaited = [], 0, []
    for a in kept:
      if not a.witnesses:
        unwaited.append(a)
        continue
      values += a.witnesses
      stood |= a.deps
    if unwaited:
      _warn_unwaited(later, unwaited, kept)
    self.used.update(id(v) for v in values)
    return values, stood

  def index(self, access: OrderedCall) -> None:
    position = len(self.log)
    self.log.append(access)
    self.live.add(id(access))
    if access.constants is None:
      self.loose.append(position)
    else:
      for c in access.constants:
        self.by_const.setdefault(c, []).append(position)

  def candidates(
    self, consts: frozenset | None, reads: bool = False
  ) -> list[OrderedCall]:
    """The recorded calls that may conflict with a call whose parts all
    name the constant handles `consts` (None: any), and that only reads
    where `reads`, in program order: those naming one of them, and those
    naming anything else; for a call that only reads, those that write.
    Any other call names only other constants, which are different
    objects, or only reads too."""
    pool = self.writing if reads else self.accesses
    if consts is None or len(pool) < 32:
      return pool
    positions = set(self._live(self.loose))
    for c in consts:
      found = self.by_const.get(c)
      if found:
        positions.update(self._live(found))
    calls = (self.log[p] for p in sorted(positions))
    if reads:
      return [a for a in calls if not a.only_reads]
    return list(calls)

  def _live(self, positions: list[int]) -> list[int]:
    """`positions` (in `log`) less those of calls no longer in `accesses`,
    dropped from the list too: each is looked at once more, not at every
    later call."""
    live = self.live
    if any(id(self.log[p]) not in live for p in positions):
      positions[:] = [p for p in positions if id(self.log[p]) in live]
    return positions

  def native(self, eqn, invals, call: NativeCall) -> list:
    keys = list(self.pending)
    if self.recompute:
      found = [self.saved.get(k) for k in keys]
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
    target = call.label
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    # An ordered effect is an order: JAX threads its token through every
    # call that has it, in program order, so this call comes after the
    # earlier ones with one of its ordered effects, and after what they
    # come after, with no entangle (and no warning for one that returns
    # no array).
    tokens = jax_compat.ordered_effects_of(eqn)
    if tokens:
      for a in self.accesses:
        if a.tokens & tokens:
          bits |= a.deps
    parts = tuple(
      p if k is None else Part(p.mode, self.root(invals[k]), p.target)
      for p, k in zip(call.parts, call.objects, strict=True)
    )
    object_index = next((k for k in call.objects if k is not None), None)
    parts, scope = self.in_resource(parts, invals, object_index, call.record)
    if self.native_log is not None:
      self.native_log.extend(parts)
    values, stood = self.witnesses_for(
      parts, bits, f"the native call `{target}`"
    )
    # A host callback whose results hold no element gets one more result,
    # so that later calls can wait for it; one whose operands hold none
    # (or that takes none) gets one more operand, to be ordered by: a value
    # of no element orders nothing, since XLA replaces it by a constant.
    # Its Python function sees neither (`_Carried`).
    adds_result = eqn.primitive.name == "io_callback" and not any(
      size(v.aval) > 0 for v in eqn.outvars
    )
    adds_operand = False
    indices: list[int] = []
    if values:
      indices = _order_operands(invals, call, object_index)
      if not indices and (
        eqn.primitive.name in _CARRIED_CALLBACKS or _print_carries(eqn)
      ):
        adds_operand = True
        invals.append(jnp.zeros((), jnp.int32))
        indices = [len(invals) - 1]
      elif not indices and eqn.primitive.name in DEBUG_CALLBACK_PRIMITIVES:
        # A jax.debug.print whose text a carrier would change
        # (`_print_carries`): nothing to order it by.
        warnings.warn(
          "in_program_order: a jax.debug.print with no operand whose text "
          "holds a brace, or that takes static arguments, cannot be ordered "
          "after earlier native calls; it runs when XLA runs it. Pass it an "
          "operand (jax.debug.print('... {}', x)) to order it.",
          stacklevel=natives.user_stacklevel(),
        )
        values = []
      elif not indices:
        raise NotImplementedError(
          f"in_program_order: the native call `{target}` (primitive "
          f"`{eqn.primitive.name}`) has no operand with elements to order "
          "it by, and must run after earlier calls (an operand of no "
          "element orders nothing: XLA replaces it by a constant). Give it "
          "an operand with elements (the handle or token it works on), or "
          "order it by hand with entangle_jax.entangle on such an operand, "
          "or Resource."
        )
    if values and indices:
      originals = [invals[k] for k in indices]
      shared = (
        self._read_operand(originals[0], values, stood)
        if len(indices) == 1 and only_reads(parts)
        else None
      )
      tied = [shared] if shared is not None else entangled(originals, values)
      for k, original, new in zip(indices, originals, tied, strict=True):
        invals[k] = new
        self.set_root(new, self.root(original))
      bits |= stood
    with scope:
      if adds_result or adds_operand:
        outs = _bind_carried(eqn, invals, adds_operand, adds_result)
      else:
        outs = self.bind(self.ordered_bodies(eqn), invals)
    extra = outs[len(eqn.outvars) :]
    outs = outs[: len(eqn.outvars)]
    if self.saving:
      # Saved by the rebuilt checkpoint's policy: never made again.
      outs = [checkpoint_name(o, SAVED) for o in outs]
    if self.top and not self.recompute and self.track_keys:
      for k, out in zip(keys, outs, strict=True):
        self.saved.setdefault(k, out)
    bit = self.new_bit()
    for out in outs:
      self.set_dep(out, bit | bits)
    for k, back in zip(call.objects, call.returns, strict=True):
      if k is None:
        continue
      obj = self.root(invals[k])
      for r in back:
        if r < len(outs):
          self.set_root(outs[r], obj)
    # A token result is a witness as an array is (issue 70): a binding
    # whose call returns only a token is waited for through it.
    if extra:
      witnesses = extra  # The result it was given (`_bind_carried`).
    elif call.witnesses is None:
      witnesses = [w for w in outs if waitable(w)][:1]
    elif call.returns_nothing:
      witnesses = []  # A call nothing can wait for: warned when needed.
    else:
      witnesses = [outs[i] for i in call.witnesses if waitable(outs[i])]
    access = OrderedCall(
      bit,
      parts,
      witnesses,
      bit | bits,
      target,
      side_effect=call.side_effect,
      results=tuple(outs),
      tokens=tokens,
    )
    self.keep.extend(outs)
    self.keep.extend(extra)
    self.add(access)
    return outs

  def _read_operand(self, operand, values: list, stood: int):
    """`operand` of a call that only reads, a view of a small traced handle
    array (``slots[k]``) or that array itself, computed again from the
    array entangled after `values`; or None when it is neither. The
    entangled array is kept for the set of witnesses: later reads of any
    of its elements that must come after the same calls take it too, one
    entangle for them all, as by hand (`entangle(slots, w)` then the
    reads), where each read's own element would take one each. Only reads
    share: a later call that conflicts with a write comes after that
    write, so it waits for another set of witnesses. At most
    `_SHARED_ROOT_LIMIT` elements: an entangle of an argument copies it
    (its result aliases its payload)."""
    chain = []
    value = operand
    while id(value) in self.viewed_from:
      eqn, value = self.viewed_from[id(value)]
      chain.append(eqn)
    root = value
    if (
      self.root(root).key is None
      or size(root) > _SHARED_ROOT_LIMIT
      or (not chain and size(root) <= 1)
    ):
      return None
    key = (id(root), tuple(id(v) for v in values))
    tied = self.entangled_roots.get(key)
    if tied is None:
      (tied,) = entangled([root], values)
      self.set_root(tied, self.root(root))
      self.set_dep(tied, stood)
      self.keep.append(root)
      self.entangled_roots[key] = tied
    for eqn in reversed(chain):
      # Each view of the entangled array bound once: later reads of the
      # same element take the same value.
      key = (id(tied), eqn.primitive, _params_key(eqn.params))
      view = self.rebound.get(key)
      if view is None:
        view = self.bind(eqn, [tied])[0]
        self.view(eqn, tied, view)
        self.rebound[key] = view
        self.keep.append(tied)
      tied = view
    return tied

  def ordered_bodies(self, eqn):
    """`eqn`, a binding's own higher-order primitive, with each sub-program
    parameter (a ``ClosedJaxpr``) that makes native calls replaced by the
    same program in program order: its calls among themselves. Against
    the calls outside, `native` orders the equation as one call. Any
    other equation is returned as it is."""
    if not any(True for _ in natives.sub_jaxprs(eqn)):
      return eqn
    changed = {}
    for key, value in eqn.params.items():
      items = value if isinstance(value, tuple | list) else (value,)
      new = [self._ordered_closed(item) for item in items]
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

  def _ordered_closed(self, item):
    if not isinstance(item, jex_core.ClosedJaxpr):
      return item
    scopes = self.scopes()
    if not natives.has_native_jaxpr(item.jaxpr, self.decls, scopes=scopes):
      return item

    def body(*args):
      inner = Context(self.decls)
      inner.outer_scopes = scopes
      outs = inner.run(item.jaxpr, item.consts, list(args))
      inner.warn_dropped(outs)
      return outs

    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in item.in_avals]
    return jax.make_jaxpr(body)(*avals)

  def in_resource(self, parts, invals, object_index, record: Record | None):
    """`parts` as the race check reads a call made through a ``Resource``
    (`record`, its innermost record in the named scopes, as the access
    policy read it for `natives.native_call`): the Resource's mode, and a
    named Resource's calls are on the object of that name; and the named
    scope to bind the call in.

    A call on a named argument (`name_arguments`) made outside any
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
          else (self.root(invals[index]) if index < len(invals) else Obj())
        )
        obj = dataclasses.replace(base, resource=name)
      elif obj is not None:
        # An unnamed Resource: the check reads no name, so neither does
        # this (an argument's name included).
        obj = dataclasses.replace(obj, resource=None)
      changed.append(dataclasses.replace(p, mode=mode, obj=obj))
    return tuple(changed), contextlib.nullcontext()

  def add(self, access: OrderedCall) -> None:
    if not self.decls.safe_pairs and not access.only_reads and access.witnesses:
      # An earlier call that this one comes after, on an object this one
      # writes, need not be looked at again: whatever conflicts with it
      # conflicts with this one, which comes after it. (A call that only
      # reads covers none; nor does one that returns no array: nothing can
      # be ordered after it, so a later call must still be ordered after
      # the earlier ones itself.)
      dropped = {
        id(a)
        for a in self._coverable(access)
        if comes_after(access.deps, a)
        and covers(access.parts, a.parts, self.decls)
      }
      if dropped:
        self.accesses[:] = [a for a in self.accesses if id(a) not in dropped]
        self.writing[:] = [a for a in self.writing if id(a) not in dropped]
        self.live -= dropped
    self.accesses.append(access)
    if not access.only_reads:
      self.writing.append(access)
    self.index(access)
    self.own.append(access)
    self.every_call.append(access)

  def _coverable(self, access: OrderedCall) -> list[OrderedCall]:
    """The recorded calls `access` may cover (`covers`): all of them, or,
    when its parts all name constants, those indexed under one of its
    constants. A part that names constants covers only a part that names
    the same object (`_same_object`), which names the same constants."""
    consts = access.constants
    if consts is None or len(self.accesses) < 32:
      return self.accesses
    positions: set[int] = set()
    for c in consts:
      found = self.by_const.get(c)
      if found:
        positions.update(self._live(found))
    return [self.log[p] for p in positions]

  def warn_dropped(self, outs: Sequence[Any]) -> None:
    """Warns of each native call that may write, has no side effect, and
    that nothing keeps: XLA drops a call whose results nothing that runs
    uses. A call is kept when it is side-effecting, when the program uses
    its results, or when a kept call comes after it (the transform's
    entangle makes that one consume its results): so a write whose only
    later call is a read nobody uses is lost with it, in a branch, a loop
    body or a helper as at the top."""
    for value in outs:
      self.used.add(id(value))
      self.program_used.add(id(value))
    needed = 0
    lost: list[OrderedCall] = []
    for a in reversed(self.every_call):
      kept = (
        a.side_effect
        or any(id(r) in self.program_used for r in a.results)
        or comes_after(needed, a)
      )
      if kept:
        needed |= a.deps
      elif any(p.mode == "write" for p in a.parts):
        lost.append(a)
    warned: set[str] = set()
    for a in reversed(lost):
      if a.label in warned:
        continue
      warned.add(a.label)
      warnings.warn(
        f"in_program_order: the native call `{a.label}` may write, but "
        "nothing uses its results and it is not side-effecting, so XLA "
        "may drop it. Use its result, or declare it has_side_effect=True.",
        stacklevel=natives.user_stacklevel(),
      )

  # Sub-programs: what the rules (`rules`) share --------------------------

  def new_bit(self) -> int:
    """The bit of a new call (or summary, or order value) of this
    evaluation."""
    return 1 << next(self.bit_counter)

  def mark(self, value: Any) -> int:
    """A new call's bit, which `value` comes after from now on (a loop
    body's probe of which carries its calls come after)."""
    bit = self.new_bit()
    self.set_dep(value, bit)
    return bit

  def record(self, summary: rule_inputs.Summary) -> None:
    """Records a sub-program's calls as one call here (a rule's
    `rule_inputs.Summary`): its witnesses, and the values it names, come
    after it and after the calls of its `deps`."""
    bit = self.new_bit()
    access = OrderedCall(
      bit,
      tuple(summary.parts),
      list(summary.witnesses),
      bit | summary.deps,
      summary.label,
    )
    self.add(access)
    for value in summary.after:
      self.set_dep(value, access.deps)

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
    if result.summary is not None:
      self.record(result.summary)
    return result.outs

  def child(self, start: ChildStart = AS_PARENT) -> Context:
    """A child evaluation of a sub-program, set up as `start` says
    (`rule_inputs.ChildStart`): a rule says how its sub-program starts,
    and the child is set up here, so no rule sets another's attributes."""
    after, deps, earlier = start.after, start.deps, start.earlier
    # False where a loop's rule has no order value in the carry.
    ordered = after is not None and after is not False
    prevs: list[OrderedCall] = []
    if ordered:
      # One call the order value `after` stands for: every call of the
      # child comes after it, and so after the calls in `deps`.
      prev_bit = self.new_bit()
      prevs.append(
        OrderedCall(
          prev_bit,
          (Part("write", None, "previous"),),
          [after],
          prev_bit,
          "",
        )
      )
    elif earlier is not None:
      # Each a call on any object, which its value stands for (a backward
      # pass after the forward pass's calls, and after later calls').
      for value, label in earlier:
        bit = self.new_bit()
        prevs.append(OrderedCall(bit, ANY, [value], bit, label))
    else:
      prevs = self.accesses
    ctx = Context(self.decls, prevs, self.track_keys)
    ctx.bit_counter = self.bit_counter
    ctx.roots = dict(self.roots)
    ctx.deps = dict(self.deps)
    ctx.keep = self.keep
    ctx.used = self.used
    ctx.program_used = self.program_used
    ctx.every_call = self.every_call
    ctx.backward = self.backward
    ctx.keys = self.keys
    ctx.saved = self.saved
    ctx.top = False
    ctx.saving = self.saving if start.saving is None else start.saving
    ctx.recompute = self.recompute or start.recompute
    ctx.native_log = [] if start.log else self.native_log
    ctx.chain = start.chain
    # A rule makes its children while it evaluates an equation, and may
    # make them inside the sub-program's own trace, whose name stack
    # starts anew: the equation's scopes are theirs.
    ctx.outer_scopes = self.eqn_scopes or self.scopes()
    if ordered:
      ctx.set_dep(after, prevs[0].bit | deps)
      ctx.prev_bit = prevs[0].bit
    elif earlier is not None:
      for (value, _), prev in zip(earlier, prevs, strict=True):
        ctx.set_dep(value, prev.bit)
    self._seed(ctx, *start.seed)
    return ctx

  def scopes(self) -> str:
    """The named scopes in effect, in full: those of the trace now, inside
    those this context's program was traced in (`outer_scopes`)."""
    current = jax_compat.current_name_stack()
    outer = self.outer_scopes
    if not outer or current.startswith(outer):
      return current
    return f"{outer}/{current}" if current else outer

  def _seed(self, child: Context, inner: Sequence[Any], outer: Sequence[Any]):
    """Inner values of a sub-program stand for `outer` ones."""
    for i, o in zip(inner, outer, strict=True):
      child.set_dep(i, self.dep(o))
      child.set_root(i, self.root(o))
      if i is not o and self.track_keys:
        child.keys[id(i)] = self.key(o)

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
    self.set_dep(token, stood)
    return token

  def exported(self) -> list:
    """Values that come after every call made in this evaluation (not in
    its parent): noted as used, in the set a child shares with its
    parent."""
    values = []
    for a in _not_covered(self.own):
      values += a.witnesses
    self.used.update(id(v) for v in values)
    # A token (of a call that returns only one) is no value a branch or a
    # loop body can hand out as its order value: an int32 scalar entangled
    # after it is, and comes after the same calls.
    return [
      _after_token(self, v) if jax_compat.is_token(v) else v for v in values
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
    self.set_dep(token, stood)

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
    tied = tie(self.chain, token, *[outs[i] for i in floats])
    outs = list(outs)
    for i, value in zip(floats, tied, strict=True):
      outs[i] = value
    return outs


def _not_covered(calls: Sequence[OrderedCall]) -> list[OrderedCall]:
  """`calls` less those another of them is ordered after, which a value
  that comes after that other one comes after too. Only a call that
  returns an array (has witnesses) carries the calls it comes after: one
  that returns nothing (a ``jax.debug.callback``) cannot be waited for,
  so the calls it comes after stay, each to be waited for itself."""
  covered = 0
  for a in calls:
    if a.witnesses:
      covered |= a.deps & ~a.bit
  return [a for a in calls if not (a.bit & covered)]


def _after_token(ctx: Context, token) -> Any:
  """An int32 scalar after `token`, which comes after what it does."""
  (after,) = entangled([jnp.zeros((), jnp.int32)], [token])
  ctx.set_dep(after, ctx.dep(token))
  ctx.keep.append(after)
  return after


def _warn_unwaited(
  later: str, unwaited: Sequence[OrderedCall], kept: Sequence[OrderedCall]
) -> None:
  """Warns that `later` cannot be ordered after the `unwaited` calls,
  which return no array, saying which orders it keeps (after the other
  calls of `kept`, and what those come after)."""
  names = ", ".join(f"`{a.label}`" for a in unwaited)
  waited = [a for a in kept if a.witnesses]
  if waited:
    keeps = (
      "Its order after the other earlier calls it conflicts with ("
      + ", ".join(f"`{a.label}`" for a in waited)
      + ") is kept."
    )
  else:
    keeps = "It loses no order after any other earlier call."
  many = len(unwaited) > 1
  warnings.warn(
    f"in_program_order: {later} cannot be ordered after the earlier native "
    f"call{'s' if many else ''} {names}, which return{'' if many else 's'} "
    f"no array: nothing can wait for {'them' if many else 'it'}, so they "
    f"may run in either order. {keeps} To order them, give the earlier "
    "call a result: make a jax.debug.callback an io_callback (which "
    "in_program_order gives a result when it has none), give an ffi_call "
    "a result, or have a binding's own primitive return one, an array or "
    "a JAX token (its lowering's custom call returning a "
    "!stablehlo.token), which later calls are then entangled after.",
    stacklevel=natives.user_stacklevel(),
  )


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


def _literal_key(atom) -> Any:
  """A literal's key: its type and value (a scalar's own, hashable; its
  text otherwise, which costs more)."""
  val = atom.val
  if np.ndim(val) == 0:
    try:
      item = val.item() if hasattr(val, "item") else val
      key = ("literal", str(atom.aval), type(val).__name__, item)
      hash(key)
      return key
    except Exception:  # Not a plain scalar: by its text below.
      pass
  return ("literal", str(atom.aval), repr(val))


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


_SHARED_ROOT_LIMIT = 4096
"""The most elements of a handle array that reads entangle whole
(`Context._read_operand`), as a constant handle array is followed."""


_CARRIED_CALLBACKS = ("io_callback", "debug_callback")
"""The host callbacks whose Python function `_Carried` can hide an operand
from and add a result for: their primitives call ``callback`` with the
flat operands and take its flat results."""


@dataclasses.dataclass(frozen=True)
class _Carried:
  """A host callback's ``callback`` parameter that takes one more operand
  than the user's function (`drops_last`), which it does not pass on, and
  returns one more result (`adds_result`), an int32 zero, for later calls
  to wait for: what the user's function sees and returns is what the
  program gave it. Equal for equal parts, as JAX's own callback parameter
  is, so that equal programs share a compilation."""

  callback: Any
  drops_last: bool
  adds_result: bool

  def __call__(self, *flat_args):
    if self.drops_last:
      flat_args = flat_args[:-1]
    results = self.callback(*flat_args)
    if not self.adds_result:
      return results
    return [*(results or ()), np.zeros((), np.int32)]


_PRINT_CARRIER = "entangle_jax_carrier"
"""The keyword a carrier operand of ``jax.debug.print`` is passed as: its
text's ``str.format`` ignores a keyword it does not name."""


def _print_carries(eqn) -> bool:
  """Whether ``jax.debug.print``'s primitive (``debug_print``, jax 0.10
  and newer; older ones bind ``debug_callback``) with no operand can take
  a carrier operand without printing anything else: its text, formatted
  with the carrier as a keyword it does not name, is the text it prints
  (no brace, which formatting would change, and no static argument)."""
  if eqn.primitive.name != "debug_print" or eqn.invars:
    return False
  params = eqn.params
  fmt = params.get("fmt")
  if not isinstance(fmt, str) or params.get("static_args"):
    return False
  return params.get("has_placeholders") or ("{" not in fmt and "}" not in fmt)


def _bind_carried(eqn, invals, adds_operand: bool, adds_result: bool) -> list:
  """Binds host callback `eqn` to `invals`, whose last value is the carrier
  operand when `adds_operand`, with one more int32 result, last, when
  `adds_result` (an io_callback)."""
  params = dict(eqn.params)
  if eqn.primitive.name == "debug_print":
    # The carrier as a keyword the text does not name (`_print_carries`).
    params["in_tree"] = jax.tree.structure(((), {_PRINT_CARRIER: 0}))
    params["has_placeholders"] = True
    return list(eqn.primitive.bind(*invals, **params))
  params["callback"] = _Carried(params["callback"], adds_operand, adds_result)
  if adds_result:
    params["result_avals"] = (
      *params["result_avals"],
      ShapedArray((), np.dtype(np.int32)),
    )
  return list(eqn.primitive.bind(*invals, **params))


def _argument_scope(parts):
  """`parts` of a call made outside any ``Resource``, and the named scope
  that records the argument it is on (see `Context.in_resource`)."""
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
