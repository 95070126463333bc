"""Which equations are native calls `in_program_order` orders, what they
declare, and which sub-programs (or custom differentiation rules) make
such calls."""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from entangle_jax._src import access_policy, jax_compat, primitive
from entangle_jax._src.access_marker import Record
from entangle_jax._src.program_order import call_like, lowered
from entangle_jax._src.program_order.dependence import shape_size
from entangle_jax._src.program_order.touches import Part
from entangle_jax._src.targets import names
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax._src.targets.library_kernels import is_library_target


@dataclasses.dataclass(frozen=True)
class NativeCall:
  """A native call (or the native calls of one equation) that
  in_program_order orders: what it touches and through which of the
  equation's inputs and outputs."""

  label: str
  """The target (or targets, or the primitive) for messages."""
  parts: tuple[Part, ...]
  """What it touches, objects not yet known (None)."""
  objects: tuple[int | None, ...]
  """Per part, the input that names its object; None: anything."""
  returns: tuple[tuple[int, ...], ...]
  """Per part, the outputs that hand its object back."""
  order: tuple[int, ...] | None
  """The inputs to entangle so that every call comes after earlier ones
  (() : the first input with elements, object first; None: none can)."""
  witnesses: tuple[int, ...] | None
  """The outputs that come after every call (None: the first output with
  elements)."""
  side_effect: bool
  returns_nothing: bool = False
  """A call of it reaches no output: nothing can wait for it."""
  record: Record | None = None
  """The innermost ``Resource`` record it was made in, its own (the
  access policy's answer), or None: made outside any ``Resource``."""


def side_effecting(eqn) -> bool:
  """Whether an ffi_call or host-callback equation is side-effecting."""
  name = eqn.primitive.name
  if name == "ffi_call":
    return bool(eqn.params.get("has_side_effect", False))
  return name != names.PURE_CALLBACK_PRIMITIVE


def _target_name(eqn) -> str | None:
  params = eqn.params
  for key in ("target_name", "call_target_name"):
    if key in params:
      return str(params[key])
  return None


def _one(
  target: str,
  decls: Declarations,
  eqn,
  side_effect: bool,
  label: str | None = None,
  records: str = "",
) -> NativeCall | None:
  """A call of `target` whose operands are `eqn`'s inputs, one to one: what
  it touches is the one access policy's answer, each operand's provenance
  the input that carries it (`entangle_jax._src.access_policy`).

  Raises:
    ValueError: its declaration names an operand the call lacks.
  """
  key = (target, decls, len(eqn.invars), side_effect, label, records)
  try:
    return _ONE[key]
  except KeyError:
    pass
  found = _ONE[key] = _read_one(target, decls, eqn, side_effect, label, records)
  return found


_ONE: dict[Any, NativeCall | None] = {}
"""`_one`'s answers by target, declarations, operand count, side effect,
label and the Resource records it was made in (a program calls one
target thousands of times)."""


def _read_one(
  target: str,
  decls: Declarations,
  eqn,
  side_effect: bool,
  label: str | None,
  records: str,
) -> NativeCall | None:
  label = target if label is None else label
  found = access_policy.footprint(
    target,
    decls,
    operands=range(len(eqn.invars)),
    op_name=records,
    side_effect=side_effect,
  )
  access_policy.check_object_operand(
    found, len(eqn.invars), f"the call of `{label}`"
  )
  if found.touches_nothing:
    return None
  obj = found.object
  returns = tuple(found.returns_object or ()) if obj is not None else ()
  return NativeCall(
    label,
    (Part(found.mode, None, target),),
    (obj,),
    (returns,),
    (),
    None,
    side_effect,
    record=found.records[-1] if found.records else None,
  )


def native_call(
  eqn, decls: Declarations, scopes: str | None = None
) -> NativeCall | None:
  """The native call `eqn` makes, for in_program_order to order, else None:
  an ``ffi_call`` (by its target), a host callback that may have effects
  (``pure_callback`` is declared pure by its user: neither this nor the
  race check orders it), one of JAX's explicit collectives where
  `ORDER_COLLECTIVES` says so (`_collective`),
  or any other first-order primitive, JAX's own included, whose lowering
  emits custom calls that are not JAX's and XLA's own kernels
  (`lowered`).

  What it touches is the access policy's answer for the call as the race
  check will see it: made in `scopes`, the equation's named scopes in
  full (its own where None), whose ``Resource`` records come before the
  declarations (a target declared ``"none"`` and called through
  ``Resource.write`` writes)."""
  name = eqn.primitive.name
  if name in (primitive.entangle_p.name, names.PURE_CALLBACK_PRIMITIVE):
    return None
  jax_own = lowered.is_jax_primitive(eqn.primitive)
  if jax_own and any(True for _ in sub_jaxprs(eqn)):
    return None  # Its sub-programs' calls are its rule's (`rules`).
  records = _records(scopes if scopes is not None else own_scopes(eqn))
  if name == "ffi_call":
    target = _target_name(eqn)
    if target is None or is_library_target(target):
      return None
    if target == names.ENTANGLE_TARGET:
      return None
    return _one(target, decls, eqn, side_effecting(eqn), records=records)
  if name in names.HOST_CALLBACK_PRIMITIVES:
    target = names.host_callback_target(
      name,
      jax.default_backend(),
      bool(eqn.params.get("partitioned", False)),
    )
    return _one(target, decls, eqn, True, f"{name} ({target})", records)
  if name in names.XLA_COLLECTIVE_PRIMITIVES:
    return _collective(eqn) if ORDER_COLLECTIVES.get() else None
  if jax_own:
    return _jax_own_call(eqn, decls, records)
  # A binding's own primitive, a higher-order one included: its own
  # lowering may make native calls before or after its body, and its body
  # may make some. The lowering holds both, so the equation is ordered as
  # one call: all of them after the earlier calls they conflict with, the
  # later calls after all of them (`Context.native` orders the body's own
  # calls among themselves).
  return _from_lowering(eqn, decls, records, jax_own=jax_own)


ORDER_COLLECTIVES: contextvars.ContextVar[bool] = contextvars.ContextVar(
  "entangle_jax_order_collectives", default=False
)
"""Whether `native_call` takes JAX's collectives for native calls, as
``in_program_order``'s ``collectives`` says (set while it traces)."""


def _collective(eqn) -> NativeCall | None:
  """An XLA collective (`names.XLA_COLLECTIVE_PRIMITIVES`), as a native
  call that writes anything: in program order after every earlier native
  call and collective, and before every later one. Every process of a
  multi-process program must make its collectives in one order; left
  free, XLA may schedule them apart in each process (one that works
  first puts them in another order), and they wait for each other for
  good. Ordering them in each process's program order is what a process
  can do; processes whose Python makes them in different orders are the
  cross-rank check's to find (`entangle_jax.testing.races_across`).

  Left alone (None): a collective of no elements (nothing to order it by;
  XLA may drop it), and one in a ``shard_map`` manual over some of the
  mesh's axes only, where JAX checks each operand's mesh against the
  region's and an ``entangle`` there would not pass (nor could a native
  call be made there: XLA does not replicate side effects)."""
  if not any(shape_size(getattr(v.aval, "shape", ())) for v in eqn.invars):
    return None
  if any(_partly_manual(v.aval) for v in eqn.invars):
    return None
  name = eqn.primitive.name
  return NativeCall(
    f"{name} (an XLA collective)",
    (Part("write", None, name),),
    (None,),
    ((),),
    (),
    None,
    True,
  )


def _partly_manual(aval) -> bool:
  """Whether `aval` is of a ``shard_map`` region manual over some of its
  mesh's axes and not all of them."""
  mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
  types = tuple(getattr(mesh, "axis_types", ()) or ())
  manual = [t == jax.sharding.AxisType.Manual for t in types]
  return any(manual) and not all(manual)


def own_scopes(eqn) -> str:
  """The named scopes of `eqn` within its own jaxpr, as text."""
  return str(eqn.source_info.name_stack)


def within(scopes: str, eqn) -> str:
  """The named scopes of `eqn` in full, its jaxpr's being `scopes` (JAX
  traces each sub-jaxpr in a name stack of its own)."""
  own = own_scopes(eqn)
  return f"{scopes}/{own}" if scopes and own else scopes or own


def _records(scopes: str) -> str:
  """`scopes` where they hold a ``Resource`` record of the call's own,
  else "": what the access policy reads of them (and the cache of
  lowerings keys on)."""
  return scopes if access_policy.own_records(scopes) else ""


def lowered_call(eqn, decls: Declarations, scopes: str) -> NativeCall | None:
  """The native calls of `eqn`, made in named scopes `scopes` (in full),
  read from its lowering alone, as one call (for a primitive whose
  sub-program the transform does not rebuild)."""
  return _from_lowering(eqn, decls, _records(scopes))


def _jax_own_call(eqn, decls: Declarations, records: str) -> NativeCall | None:
  """The native calls of one of JAX's own primitives, read from its
  lowering: a list of those that make none cannot be trusted to be
  complete (``debug_print`` and ``call_exported`` make host callbacks and
  the exported module's custom calls), so its lowering says, as a
  binding's does. Its sub-programs' calls are its rule's (`rules`).

  A primitive whose parameters are all plain data (numbers, flags, dtypes,
  enums, shapes: no function, program, text or other object, which is
  where a native call's target, callback or module would be) is read once
  per kind (`_kind`): when its first equation of a kind lowers to no
  native call, neither do the others, whose parameters only size, index
  or lay out the same operation (``slice`` at another start, a
  ``concatenate`` of more operands). The first such equation is still
  lowered and read; a kind that made a native call is read equation by
  equation."""
  if not _plain_params(eqn.params):
    if any(True for _ in sub_jaxprs(eqn)):
      return None  # Its sub-programs' calls are its rule's (`rules`).
    return _from_lowering(eqn, decls, records, jax_own=True)
  kind = _kind(eqn, decls, records)
  if kind is not None and kind in _NO_NATIVE_KINDS:
    return None
  found = _from_lowering(eqn, decls, records, jax_own=True)
  if found is None and kind is not None:
    _NO_NATIVE_KINDS.add(kind)
  return found


_NO_NATIVE_KINDS: set[Any] = set()
"""The kinds (`_kind`) of JAX's own primitives of plain parameters whose
first equation lowered to no native call."""

_PLAIN_SCALARS = (
  bool,
  int,
  float,
  complex,
  np.number,
  np.bool_,
  np.dtype,
  enum.Enum,
)


def _plain_params(params) -> bool:
  """Whether every parameter is plain data (`_jax_own_call`): a number, a
  flag, None, a dtype, an enum, or a tuple (a named one too) of those."""
  return all(_plain(v) for v in params.values())


def _plain(value) -> bool:
  if value is None or isinstance(value, _PLAIN_SCALARS):
    return True
  if isinstance(value, tuple):
    return all(_plain(v) for v in value)
  return False


def _kind(eqn, decls: Declarations, records: str):
  """What a lowering of plain parameters is read once for: the primitive,
  its operands' dtypes and ranks (not their number or sizes), the
  backend, 64-bit types, the declarations and the Resource records it is
  made in; None where they cannot be hashed."""
  operands = frozenset(
    (
      getattr(v.aval, "dtype", None),
      len(getattr(v.aval, "shape", ())),
      bool(getattr(v.aval, "weak_type", False)),
    )
    for v in eqn.invars
  )
  key = (
    eqn.primitive,
    operands,
    jax.default_backend(),
    bool(jax.config.jax_enable_x64),  # ty: ignore[missing-attribute]
    decls,
    records,
  )
  try:
    hash(key)
  except TypeError:
    return None
  return key


_FROM_LOWERING: dict[Any, NativeCall | None] = {}


def _from_lowering(
  eqn, decls: Declarations, records: str, jax_own: bool = False
) -> NativeCall | None:
  """`_read_lowering`, once per lowering key and declarations (a program
  that makes one binding call a thousand times reads it once)."""
  key = lowered.key_of(eqn)
  if key is None:
    return _read_lowering(eqn, decls, records, jax_own)
  key = (key, decls, records)
  try:
    return _FROM_LOWERING[key]
  except KeyError:
    pass
  except TypeError:  # Declarations that cannot be hashed.
    return _read_lowering(eqn, decls, records, jax_own)
  found = _FROM_LOWERING[key] = _read_lowering(eqn, decls, records, jax_own)
  return found


def _read_lowering(
  eqn, decls: Declarations, records: str, jax_own: bool = False
) -> NativeCall | None:
  found = lowered.lower(eqn)
  if found.error is not None and jax_own:
    # One of JAX's own primitives that lowers only inside a program that
    # gives it what it needs (a collective's named axis, a mesh): as
    # before, read as making no native call. JAX's native calls (FFI
    # calls, host callbacks, an exported module) lower alone.
    return None
  if found.error is not None:
    _warn_once(
      eqn.primitive,
      f"in_program_order: cannot tell whether the primitive "
      f"`{eqn.primitive.name}` makes a native call: lowered alone, it "
      f"failed ({found.error}). It is ordered as a native call that may "
      "write anything. Declare nothing for it; to order it yourself, use "
      "entangle_jax.entangle or Resource.",
    )
    return NativeCall(
      eqn.primitive.name,
      (Part("write", None, eqn.primitive.name),),
      (None,),
      ((),),
      (),
      None,
      bool(eqn.effects),
    )
  parts, objects, returns, calls = [], [], [], []
  record = None  # Every call of the lowering is made in the same scopes.
  for call in found.calls:
    target = call.target
    if target == names.ENTANGLE_TARGET or is_library_target(target):
      continue
    touched = access_policy.footprint(
      target,
      decls,
      operands=call.operands,
      op_name=records,
      side_effect=call.side_effect,
    )
    access_policy.check_object_operand(
      touched,
      len(call.operands),
      f"the custom call of `{target}` in `{eqn.primitive.name}`'s lowering",
    )
    if touched.touches_nothing:
      continue  # A pure_callback, or declared to touch nothing.
    if touched.records:
      record = touched.records[-1]
    mode = touched.mode
    obj = touched.object
    back: tuple[int, ...] = ()
    if obj is not None:
      back = tuple(
        o
        for r in touched.returns_object or ()
        if r < len(call.results)
        for o in call.results[r]
      )
    parts.append(Part(mode, None, target))
    objects.append(obj)
    returns.append(back)
    calls.append(call)
  if not calls:
    return None
  sizes = [_size(v.aval) for v in eqn.invars]
  # Entangle inputs that every call depends on: its object input first.
  order: list[int] = []
  orderable = True
  for call, obj in zip(calls, objects, strict=True):
    if any(k in call.inputs for k in order):
      continue
    candidates = ([obj] if obj is not None else []) + sorted(call.inputs)
    pick = next((k for k in candidates if sizes[k] > 0), None)
    if pick is None:
      orderable = False  # A call that depends on no input with elements.
      break
    order.append(pick)
  # A token output is waited for as an array is (`values.waitable`).
  out_sizes = [
    1 if jax_compat.is_token_aval(v.aval) else _size(v.aval)
    for v in eqn.outvars
  ]
  witnesses: list[int] = []
  nothing = False
  for call in calls:
    if any(o in call.outputs for o in witnesses):
      continue
    pick = next((o for o in sorted(call.outputs) if out_sizes[o] > 0), None)
    if pick is None:
      nothing = True
    else:
      witnesses.append(pick)
  label = ", ".join(dict.fromkeys(c.target for c in calls))
  return NativeCall(
    label,
    tuple(parts),
    tuple(objects),
    tuple(returns),
    tuple(order) if orderable else None,
    tuple(witnesses),
    any(c.side_effect for c in calls) or bool(eqn.effects),
    nothing,
    record,
  )


def _size(aval) -> int:
  """The elements of a value of `aval`: none for a token, which an
  entangle on it cannot order."""
  if jax_compat.is_token_aval(aval):
    return 0
  return shape_size(getattr(aval, "shape", ()))


_WARNED: set[Any] = set()


def _warn_once(key, message: str) -> None:
  if key in _WARNED:
    return
  _WARNED.add(key)
  warnings.warn(message, stacklevel=user_stacklevel())


def user_stacklevel() -> int:
  """The warning's stack level of the first frame outside entangle_jax's
  transform and JAX: the user's line that called the transformed
  function (the interpreter's warnings use it too)."""
  frame, level = sys._getframe(1), 1
  while frame is not None:
    name = frame.f_globals.get("__name__", "")
    if not name.startswith(("entangle_jax._src.program_order", "jax.")):
      return level
    frame, level = frame.f_back, level + 1
  return 1


def sub_jaxprs(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, tuple | list) else (value,):
      if isinstance(item, jex_core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jex_core.Jaxpr):
        yield item


def all_eqns(jaxpr):
  for eqn, _ in eqns_in_scopes(jaxpr, ""):
    yield eqn


def eqns_in_scopes(jaxpr, scopes: str):
  """Each equation of `jaxpr` and of its sub-jaxprs, with its named
  scopes in full (`within`), `jaxpr`'s being `scopes`."""
  for eqn in jaxpr.eqns:
    full = within(scopes, eqn)
    yield eqn, full
    for sub in sub_jaxprs(eqn):
      yield from eqns_in_scopes(sub, full)


def has_native_jaxpr(
  jaxpr, decls, rules: bool = True, scopes: str = ""
) -> bool:
  """Whether `jaxpr`, in named scopes `scopes`, makes a native call, in a
  sub-jaxpr or (with `rules`) a custom differentiation rule included."""
  return any(
    native_call(e, decls, full) is not None
    or (rules and _custom_rules_native(e, decls))
    for e, full in eqns_in_scopes(jaxpr, scopes)
  )


def has_checkpoint(jaxpr) -> bool:
  """Whether `jaxpr` (or a sub-jaxpr) holds a checkpoint, which JAX's
  differentiation may have made to recompute forward values: the only
  reader of the keys of what computes each value (`ValueTable.key`)."""
  return any(e.primitive.name in call_like.CHECKPOINTS for e in all_eqns(jaxpr))


def has_native(eqn, decls, scopes: str = "") -> bool:
  """Whether a sub-jaxpr of `eqn` (made in named scopes `scopes`, its own
  included), or a custom rule of it, makes a native call."""
  if any(has_native_jaxpr(j, decls, scopes=scopes) for j in sub_jaxprs(eqn)):
    return True
  return _custom_rules_native(eqn, decls)


_RULES_CACHE: dict[int, tuple[Any, Declarations, bool, Any]] = {}
_BACKWARD_CACHE: dict[int, tuple[Any, Declarations, bool, Any]] = {}


def _once(cache: dict, compute, eqn, decls):
  """``compute(eqn, decls)``, once per equation and declarations (loop
  bodies are traced more than once)."""
  found = cache.get(id(eqn))
  collectives = ORDER_COLLECTIVES.get()
  if (
    found is not None
    and found[0] is eqn
    and found[1] == decls
    and found[2] == collectives
  ):
    return found[3]
  if len(cache) > 1024:
    cache.clear()
  result = compute(eqn, decls)
  cache[id(eqn)] = (eqn, decls, collectives, result)
  return result


def _custom_rules_native(eqn, decls) -> bool:
  """`_rules_have_native` for a custom_jvp or custom_vjp call, once per
  equation; False for others."""
  if eqn.primitive.name not in ("custom_jvp_call", "custom_vjp_call"):
    return False
  return _once(_RULES_CACHE, _rules_have_native, eqn, decls)


def _rules_have_native(eqn, decls) -> bool:
  """Whether the differentiation rules of a custom_jvp or custom_vjp call
  (its JVP, its forward or backward pass) make a native call: traced as
  ``jax.jvp`` and ``jax.vjp`` of the call would run them."""
  avals, floats = _inputs(eqn)

  def differentiated(*args):
    def on_floats(*xs):
      return _bind_on_floats(eqn, floats, args, xs)

    xs = [a for a, f in zip(args, floats, strict=True) if f]
    outs, tangents = jax.jvp(on_floats, xs, [jnp.ones_like(x) for x in xs])
    outs, pullback = jax.vjp(on_floats, *xs)
    return tangents, pullback([_ones_cotangent(o) for o in outs])

  try:
    traced = jax.make_jaxpr(differentiated)(*avals)
  except Exception:  # Cannot tell: rebuild it, which orders whatever runs.
    return True
  # First-order: the rules of custom calls that the rules make are not run
  # by this differentiation (and a rule that calls its own function would
  # otherwise be traced without end).
  return has_native_jaxpr(traced.jaxpr, decls, rules=False)


def backward_parts(eqn, decls: Declarations) -> tuple[Part, ...]:
  """What the native calls of a custom_vjp call's backward pass touch
  (objects unknown; traced as ``jax.vjp`` of the call would run it, once
  per equation); () for a custom_vjp whose backward pass makes none, and
  for any other equation."""
  if eqn.primitive.name != "custom_vjp_call":
    return ()
  return _once(_BACKWARD_CACHE, _backward_parts, eqn, decls)


def _backward_parts(eqn, decls) -> tuple[Part, ...]:
  avals, _ = _inputs(eqn)
  holder = {}

  def forward(*args):
    outs, pullback = jax.vjp(lambda *a: jax_compat.bind_equation(eqn, a), *args)
    leaves, holder["treedef"] = jax.tree_util.tree_flatten(pullback)
    holder["outs"] = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs]
    return leaves

  def backward(leaves, float_cts):
    it = iter(float_cts)
    cts = [
      next(it) if _inexact(o) else np.zeros(o.shape, jax.dtypes.float0)
      for o in holder["outs"]
    ]
    return jax.tree_util.tree_unflatten(holder["treedef"], leaves)(cts)

  try:
    leaves = jax.eval_shape(forward, *avals)
    floats = [o for o in holder["outs"] if _inexact(o)]
    traced = jax.make_jaxpr(backward)(leaves, floats)
  except Exception:  # Cannot tell: as if it could touch anything.
    return (Part("write", None, "custom_vjp backward pass"),)
  return _parts_of_any_object(traced.jaxpr, decls)


_RULE_PARTS_CACHE: dict[int, tuple[Any, Declarations, Any]] = {}


def rule_parts(eqn, decls: Declarations) -> tuple[Part, ...]:
  """What the native calls of a custom_jvp call's JVP rule, or of a
  custom_vjp call's forward pass, touch (objects unknown; traced as
  ``jax.jvp`` and ``jax.vjp`` of the call would run them, once per
  equation): they run in the primal's place under differentiation, so
  they are ordered as the primal's calls are. () for other equations."""
  if eqn.primitive.name not in ("custom_jvp_call", "custom_vjp_call"):
    return ()
  return _once(_RULE_PARTS_CACHE, _rule_parts, eqn, decls)


def _rule_parts(eqn, decls) -> tuple[Part, ...]:
  avals, floats = _inputs(eqn)

  def rule(*args):
    def on_floats(*xs):
      return _bind_on_floats(eqn, floats, args, xs)

    xs = [a for a, f in zip(args, floats, strict=True) if f]
    if eqn.primitive.name == "custom_jvp_call":
      return jax.jvp(on_floats, xs, [jnp.ones_like(x) for x in xs])
    outs, pullback = jax.vjp(on_floats, *xs)
    return outs, jax.tree_util.tree_leaves(pullback)

  try:
    traced = jax.make_jaxpr(rule)(*avals)
  except Exception:  # Cannot tell: as if it could touch anything.
    return (Part("write", None, "custom rule"),)
  return _parts_of_any_object(traced.jaxpr, decls)


def _inputs(eqn) -> tuple[list, list[bool]]:
  """The shapes of equation `eqn`'s inputs, and which of them are
  floating (the ones its rules differentiate)."""
  avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
  return avals, [jnp.issubdtype(a.dtype, jnp.inexact) for a in avals]


def _bind_on_floats(eqn, floats: list[bool], args, xs):
  """`eqn` bound on `args` with its floating inputs taken from `xs`."""
  it = iter(xs)
  full = [next(it) if f else a for a, f in zip(args, floats, strict=True)]
  return jax_compat.bind_equation(eqn, full)


def _parts_of_any_object(jaxpr, decls: Declarations) -> tuple[Part, ...]:
  """What the native calls of `jaxpr` touch, their objects unknown (the
  rules of a custom derivative, traced apart from the program)."""
  parts = []
  for e in all_eqns(jaxpr):
    found = native_call(e, decls)
    if found is not None:
      parts += [Part(p.mode, None, p.target) for p in found.parts]
  return tuple(dict.fromkeys(parts))


def backward_in(jaxprs, decls: Declarations) -> bool:
  """Whether `jaxprs` (or their sub-jaxprs) call a custom_vjp whose
  backward pass makes a native call."""
  return any(
    backward_parts(e, decls) for jaxpr in jaxprs for e in all_eqns(jaxpr)
  )


def _inexact(aval) -> bool:
  return bool(jnp.issubdtype(aval.dtype, jnp.inexact))


def _ones_cotangent(out):
  if jnp.issubdtype(out.dtype, jnp.inexact):
    return jnp.ones_like(out)
  return np.zeros(out.shape, jax.dtypes.float0)


def first_native(eqn, decls, scopes: str = "") -> str:
  for sub in sub_jaxprs(eqn):
    for e, full in eqns_in_scopes(sub, scopes):
      found = native_call(e, decls, full)
      if found is not None:
        return found.label
  return "a native call"
