"""`in_program_order(f)`: every native call of `f` ordered as the program made
it, by `entangle` edges added to `f`'s traced program.

`f` is traced to a jaxpr, which is evaluated again equation by equation, each
in its own source line and named scopes. Before a native call (an
``ffi_call``, a host callback) is bound, its object operand is entangled with
the results of the earlier calls it conflicts with: a read after earlier
writes of an object it may touch, a write after earlier reads and writes of
one. What a call touches is what its target's declaration says
(`entangle_jax._src.targets`), or the ``Resource`` it was made through
(`entangle_jax._src.access_marker`); a target nothing declares may touch
anything. Edges that data already implies (the call's operands depend on the
earlier call's result) are left out, and one ``entangle`` takes all of a
call's witnesses.

Sub-programs with native calls are transformed too: ``jit`` is inlined;
``scan``, ``while_loop``, ``cond``, ``checkpoint`` and ``shard_map`` are
rebuilt with their public functions, loops ordering one iteration's calls
after the previous one's (through their carries where data already does,
else through one order value in the carry); ``custom_jvp`` and
``custom_vjp`` are rebuilt around transformed rules traced from ``jax.jvp``
and ``jax.vjp`` of the original call. Any other primitive with a native call
inside raises.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.extend import core as jex_core

from entangle_jax._src import access_marker, arrays, jax_compat, primitive
from entangle_jax._src.entangle import entangle
from entangle_jax._src.targets import names, sources
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax._src.targets.library_kernels import is_library_target

_HOST_CALLBACKS = ("io_callback", "debug_callback", "pure_callback")
_LOOPS = ("scan", "while")
_CALLS = ("pjit", "jit", "closed_call", "core_call")
_REMAT = ("checkpoint", "remat", "remat2")


def in_program_order(f: Callable[..., Any]) -> Callable[..., Any]:
  """Returns `f` with every native call on one object in program order.

  ``jax.jit(in_program_order(step))`` computes what ``jax.jit(step)``
  computes, but its native calls (``jax.ffi.ffi_call``, ``io_callback``,
  ``jax.debug.callback``, ``pure_callback``) run in the order in which the
  Python program made them, as far as they may touch one object:

  * a read runs after every earlier write of an object it may touch;
  * a write runs after every earlier read and write of such an object;
  * reads between the same two writes stay free to run concurrently.

  What a call touches is what its target's declaration says
  (``declare_target``, ``[tool.entangle-jax]``, ...): its mode and its object
  operand. A target nothing declares is taken to write anything: it is
  ordered against every other native call. Calls proven to touch different
  objects (different integer constants, or values a declared
  ``returns_object`` result hands back for them) are not ordered. JAX's,
  jaxlib's and XLA's own kernels are left alone.

  The order is made of `entangle` calls on each later call's object operand
  (operand 0 when none is declared), so it costs what ``entangle`` costs:
  none where data already orders two calls, one per call otherwise. Inside a
  ``scan`` or ``while_loop`` body, calls are ordered after the previous
  iteration's too: through the carry where it already does, else through
  one more int32 value in the carry.

  Works under ``jit``, eagerly, under ``jax.disable_jit()`` (where `f`
  runs as it is: each call runs before the next starts), with ``vmap`` and
  ``grad`` on either side, and through ``jax.export``. Inside it, calls in
  ``jit``, ``scan``, ``while_loop``, ``cond``/``switch``, ``checkpoint``,
  ``shard_map``, ``custom_jvp`` and ``custom_vjp`` (the JVP rule, forward
  and backward passes included) are ordered too. Array arguments (leaves of
  pytrees) are traced; other leaves reach `f` as they are, as static
  values. `testing.races` of the compiled module is the proof of the result.

  Not ordered: a backward pass's calls after the forward calls that follow
  its custom_vjp (only after its own forward pass); later calls after a call
  that returns nothing, such as ``jax.debug.callback`` (this warns).

  Args:
    f: the function whose native calls to order.

  Returns:
    A function of `f`'s signature that returns what `f` returns.

  Raises:
    TypeError: `f` is not callable; or, when called, an argument is an
      array of a type JAX does not trace (the message names it).
    NotImplementedError: when called, `f` makes a native call inside a
      higher-order primitive this transform does not know (the message
      names it), or a native call with no operand to order it by.

  Warns:
    UserWarning: a native call that is not side-effecting may write but
      nothing uses its results, so XLA drops it (the message names the
      target); or later calls cannot be ordered after a call that returns
      nothing.
  """
  if not callable(f):
    raise TypeError(f"in_program_order: f must be callable, not {f!r}")

  @functools.wraps(f)
  def ordered(*args, **kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    for leaf, path in zip(leaves, _paths((args, kwargs)), strict=True):
      if _is_array_like(leaf) and not arrays.is_array(leaf):
        raise TypeError(
          f"in_program_order: argument {path} is an array of a type JAX "
          f"does not trace ({type(leaf).__name__} of dtype "
          f"{getattr(leaf, 'dtype', '?')}); pass a JAX or NumPy array of a "
          "supported dtype, or something that is not an array"
        )
    if jax.config.jax_disable_jit:  # ty: ignore[missing-attribute]
      return f(*args, **kwargs)  # Each call runs before the next starts.
    # Arrays are traced; anything else (Python scalars included, as
    # jit's static arguments arrive) reaches `f` as it is.
    dynamic = [_is_array_like(leaf) for leaf in leaves]
    out_tree, static_out = [], {}

    def flat(*traced):
      it = iter(traced)
      full = [
        next(it) if d else leaf for leaf, d in zip(leaves, dynamic, strict=True)
      ]
      a, k = jax.tree_util.tree_unflatten(treedef, full)
      out_leaves, out_def = jax.tree_util.tree_flatten(f(*a, **k))
      out_tree.append(out_def)
      arrays_out = []
      for index, leaf in enumerate(out_leaves):
        if _is_array_like(leaf):
          arrays_out.append(leaf)
        else:
          static_out[index] = leaf
      return arrays_out

    traced = [leaf for leaf, d in zip(leaves, dynamic, strict=True) if d]
    closed = jax.make_jaxpr(flat)(*traced)
    ctx = _Context(sources.current())
    outs = iter(ctx.run(closed.jaxpr, closed.consts, traced))
    result = [
      static_out[i] if i in static_out else next(outs)
      for i in range(out_tree[0].num_leaves)
    ]
    ctx.warn_dropped(result)
    return jax.tree_util.tree_unflatten(out_tree[0], result)

  return ordered


def _paths(tree: Any) -> list[str]:
  (args, kwargs) = tree
  found = []
  for path, _ in jax.tree_util.tree_leaves_with_path(args):
    found.append("args" + jax.tree_util.keystr(path))
  for path, _ in jax.tree_util.tree_leaves_with_path(kwargs):
    found.append("kwargs" + jax.tree_util.keystr(path))
  return found


def _is_array_like(leaf: Any) -> bool:
  """An array (JAX, NumPy, a NumPy scalar, a tracer): what is traced."""
  return isinstance(leaf, jax.Array | np.ndarray | np.generic) or hasattr(
    leaf, "__jax_array__"
  )


# ----------------------------------------------------------------------------
# What a call touches.


@dataclasses.dataclass(frozen=True)
class _Obj:
  """What names the object a call touches: `consts` when its operand is a
  constant (the integers it holds), else `key` (the id of its root value)
  and, for part of that value (``handles[3]``), `elements`: the flat
  indices into it. `array` and `index` are the constant, and the indices,
  in the operand's shape, for following further views."""

  consts: frozenset | None = None
  key: int | None = None
  elements: frozenset | None = None
  array: Any = dataclasses.field(default=None, compare=False)
  index: Any = dataclasses.field(default=None, compare=False)
  resource: str | None = None  # A named Resource's name.

  def distinct_from(self, other: _Obj, elements_distinct: bool) -> bool:
    if (
      self.resource is not None
      and other.resource is not None
      and self.resource != other.resource
      and not self.same_value(other)
    ):
      return True  # As the race check reads Resource names.
    if self.consts is not None and other.consts is not None:
      return not (self.consts & other.consts)
    if (
      elements_distinct
      and self.key is not None
      and self.key == other.key
      and self.elements is not None
      and other.elements is not None
    ):
      return not (self.elements & other.elements)
    return False

  def same_value(self, other: _Obj) -> bool:
    """Whether both are one value (one token), or overlapping constants."""
    if self.consts is not None and other.consts is not None:
      return bool(self.consts & other.consts)
    if self.key is None or self.key != other.key:
      return False
    if self.elements is not None and other.elements is not None:
      return bool(self.elements & other.elements)
    return True


@dataclasses.dataclass(frozen=True)
class _Part:
  mode: str  # "read" or "write"
  obj: _Obj | None  # None: anything
  target: str


@dataclasses.dataclass
class _Access:
  """A native call (or a summary of several, for a loop or a branch)."""

  bit: int
  parts: tuple[_Part, ...]
  witnesses: list[Any]
  deps: int  # The accesses this one is ordered after, itself included.
  label: str
  side_effect: bool = True
  results: tuple[Any, ...] = ()
  warned: bool = False


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


def _covers(later: Sequence[_Part], earlier: Sequence[_Part]) -> bool:
  """Whether every call that conflicts with `earlier` conflicts with
  `later` (which writes what `earlier` touches, or anything)."""
  writes = [p for p in later if p.mode == "write"]
  return all(
    any(
      w.obj is None or (w.obj == e.obj and w.target == e.target) for w in writes
    )
    for e in earlier
  )


def _conflicts(
  a: Sequence[_Part], b: Sequence[_Part], decls: Declarations
) -> bool:
  return any(_part_conflict(x, y, decls) for x in a for y in b)


def _part_conflict(x: _Part, y: _Part, decls: Declarations) -> bool:
  if x.mode == "read" and y.mode == "read":
    return False
  if decls.safe(x.target, y.target) is not None:
    return False
  if x.obj is None or y.obj is None:
    return True
  distinct = decls.distinct_for(decls.for_target(x.target)) and (
    decls.distinct_for(decls.for_target(y.target))
  )
  return not x.obj.distinct_from(y.obj, distinct)


_bits = itertools.count()


def _new_bit() -> int:
  return 1 << next(_bits)


# ----------------------------------------------------------------------------
# The interpreter.


class _Context:
  """One program's evaluation: the native calls made so far, and for each
  value the calls it depends on and the object it names."""

  def __init__(self, decls: Declarations, accesses: Sequence[_Access] = ()):
    self.decls = decls
    self.accesses: list[_Access] = list(accesses)
    self.own: list[_Access] = []  # Made in this context.
    self.deps: dict[int, int] = {}
    self.roots: dict[int, _Obj] = {}
    self.used: set[int] = set()
    self.keep: list[Any] = []
    self.loop_aval = None

  # Values ---------------------------------------------------------------

  def dep(self, value: Any) -> int:
    return self.deps.get(id(value), 0)

  def set_dep(self, value: Any, bits: int) -> None:
    if bits:
      self.keep.append(value)
      self.deps[id(value)] = self.deps.get(id(value), 0) | bits

  def root(self, value: Any) -> _Obj:
    found = self.roots.get(id(value))
    if found is not None:
      return found
    array = _constant_array(value)
    if array is not None:
      return _Obj(
        consts=frozenset(int(v) for v in array.reshape(-1)), array=array
      )
    self.keep.append(value)
    return _Obj(key=id(value))

  def view(self, eqn, operand, out) -> None:
    """`out`, a view of `operand` (a slice, a reshape, ...), names the
    objects the elements it holds name."""
    obj = self.root(operand)
    if obj.consts is not None and obj.array is not None:
      array = _apply_view(eqn, obj.array)
      if array is not None:
        consts = frozenset(int(v) for v in array.reshape(-1))
        self.set_root(out, _Obj(consts=consts, array=array))
      return
    if obj.key is None:
      return
    index = obj.index
    if index is None:
      shape = tuple(eqn.invars[0].aval.shape)
      index = np.arange(int(np.prod(shape))).reshape(shape)
    index = _apply_view(eqn, index)
    if index is not None:
      elements = frozenset(int(v) for v in index.reshape(-1))
      self.set_root(out, _Obj(key=obj.key, elements=elements, index=index))

  def set_root(self, value: Any, obj: _Obj) -> None:
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
      with jax_compat.equation_context(eqn):
        outs = self.eval_eqn(eqn, invals)
      for var, value in zip(eqn.outvars, outs, strict=True):
        env[var] = value  # A dropped output's var is never read.
    outs = [read(atom) for atom in jaxpr.outvars]
    for value in outs:
      self.used.add(id(value))
    return outs

  def eval_eqn(self, eqn, invals: list) -> list:
    name = eqn.primitive.name
    native = _native_call(eqn, self.decls)
    if native is not None:
      return self.native(eqn, invals, *native)
    if name == primitive.entangle_p.name:
      outs = self.bind(eqn, invals)
      for value, out in zip(invals, outs, strict=False):  # Payloads first.
        self.set_root(out, self.root(value))
      return outs
    if name in _VIEWS:
      outs = self.bind(eqn, invals)
      self.view(eqn, invals[0], outs[0])
      return outs
    if not _has_native(eqn, self.decls):
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
      f"native call ({_first_native(eqn, self.decls)}), and in_program_order "
      "cannot order calls inside it. Move the native call out of it, or "
      "order it by hand with entangle_jax.entangle or Resource."
    )

  def bind(self, eqn, invals: list) -> list:
    outs = jax_compat.bind_equation(eqn, invals)
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    for out in outs:
      self.set_dep(out, bits)
    return outs

  # Native calls ---------------------------------------------------------

  def witnesses_for(self, parts, bits: int) -> tuple[list, int]:
    """The values a call of `parts`, whose operands depend on the calls in
    `bits`, must be entangled with; and the calls they stand for."""
    needed = [
      a
      for a in self.accesses
      if not (a.bit & bits) and _conflicts(a.parts, parts, self.decls)
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

  def native(self, eqn, invals, target, parts, object_index, returns) -> list:
    invals = list(invals)
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    if object_index is not None:
      obj = self.root(invals[object_index])
      parts = tuple(dataclasses.replace(p, obj=obj) for p in parts)
    parts = self.in_resource(parts, invals, object_index)
    values, stood = self.witnesses_for(parts, bits)
    index = None
    if values:
      index = _orderable_operand(invals, object_index)
      if index is None and target == "debug_callback":
        warnings.warn(
          "in_program_order: a jax.debug.callback with no operand cannot be "
          "ordered after earlier native calls; it runs when XLA runs it.",
          stacklevel=_stacklevel(),
        )
        values = []
      elif index is None:
        raise NotImplementedError(
          f"in_program_order: the native call `{target}` has no operand with "
          "elements to order it by, and must run after earlier calls. Give "
          "it an operand (the handle or token it works on)."
        )
    if values and index is not None:
      original = invals[index]
      invals[index] = entangle(original, *values)
      self.set_root(invals[index], self.root(original))
      bits |= stood
    outs = self.bind(eqn, invals)
    bit = _new_bit()
    for out in outs:
      self.set_dep(out, bit | bits)
    if object_index is not None:
      obj = self.root(invals[object_index])
      for r in returns:
        if r < len(outs):
          self.set_root(outs[r], obj)
    witnesses = [w for w in outs if _size(w) > 0][:1]
    access = _Access(
      bit,
      parts,
      witnesses,
      bit | bits,
      target,
      side_effect=_side_effecting(eqn),
      results=tuple(outs),
    )
    self.keep.extend(outs)
    self.add(access)
    return outs

  def in_resource(self, parts, invals, object_index):
    """`parts` as the race check reads a call made through a ``Resource``
    (its innermost record in the named scopes): the Resource's mode, and a
    named Resource's calls are on the object of that name."""
    found = _resource_record(jax_compat.current_name_stack())
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
          else (self.root(invals[index]) if index < len(invals) else _Obj())
        )
        obj = dataclasses.replace(base, resource=name)
      changed.append(dataclasses.replace(p, mode=mode, obj=obj))
    return tuple(changed)

  def add(self, access: _Access) -> None:
    if not self.decls.safe_pairs:
      # An earlier call that this one comes after, on an object this one
      # writes, need not be looked at again: whatever conflicts with it
      # conflicts with this one, which comes after it.
      self.accesses = [
        a
        for a in self.accesses
        if not (a.bit & access.deps and _covers(access.parts, a.parts))
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

  def summary(self, parts, witnesses, deps_in: int, label: str) -> _Access:
    bit = _new_bit()
    access = _Access(bit, tuple(parts), list(witnesses), bit | deps_in, label)
    self.add(access)
    return access

  def child(self, accesses=None) -> _Context:
    ctx = _Context(self.decls, self.accesses if accesses is None else accesses)
    ctx.roots = dict(self.roots)
    ctx.deps = dict(self.deps)
    ctx.keep = self.keep
    ctx.used = self.used
    return ctx

  def seed(self, child: _Context, inner: Sequence[Any], outer: Sequence[Any]):
    """Inner values of a sub-program stand for `outer` ones."""
    for i, o in zip(inner, outer, strict=True):
      child.set_dep(i, self.dep(o))
      child.set_root(i, self.root(o))

  def sub_parts(self, jaxprs) -> tuple[_Part, ...]:
    """What the native calls of `jaxprs` (and their sub-jaxprs) touch,
    objects unknown: used to order a sub-program against the outside."""
    parts = []
    for jaxpr in jaxprs:
      for eqn in _all_eqns(jaxpr):
        found = _native_call(eqn, self.decls)
        if found is not None:
          for p in found[1]:
            parts.append(_Part(p.mode, None, p.target))
    return tuple(dict.fromkeys(parts))

  def order_token(self, parts, aval=None):
    """A value ordered after the earlier calls `parts` conflict with: an
    int32 scalar, or of `aval`, which is then the one witness itself when
    there is one of that type (no entangle)."""
    values, _ = self.witnesses_for(parts, 0)
    return _token_of(values, aval)

  def exported(self, ctx: _Context) -> list:
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

    def branch_fn(closed, aval=None, found=None):
      def fn(*args):
        ctx = self.child()
        self.seed(ctx, args, ops)
        jaxpr, consts = _open(closed)
        outs = ctx.run(jaxpr, consts, list(args))
        exported = self.exported(ctx)
        if found is not None:
          found.append([_aval(e) for e in exported])
        return outs, _token_of(exported, aval)

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
      outs, token = jax.lax.cond(index, fns[1], fns[0], *ops)
    else:
      outs, token = jax.lax.switch(index, fns, *ops)
    return self.after_sub(parts, list(outs), token, invals, "cond")

  def after_sub(self, parts, outs, token, invals, label) -> list:
    """Registers a sub-program's calls (`parts`) as one call here, which
    `token` (a value, or a list of values) comes after."""
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    tokens = list(token) if isinstance(token, list | tuple) else [token]
    access = self.summary(parts, tokens, bits, label)
    for out in outs:
      self.set_dep(out, bits)
    for t in tokens:
      self.set_dep(t, access.deps)
    return outs

  def remat(self, eqn, invals) -> list:
    params = eqn.params
    jaxpr = params["jaxpr"]
    holder = {}

    def fn(*args):
      ctx = self.child()
      self.seed(ctx, args, invals)
      outs = ctx.run(jaxpr, (), list(args))
      holder["parts"] = _own_parts(ctx)
      return outs, self.exported(ctx)

    kwargs = {"prevent_cse": params.get("prevent_cse", True)}
    if params.get("policy") is not None:
      kwargs["policy"] = params["policy"]
    outs, exported = jax.checkpoint(fn, **kwargs)(*invals)
    return self.after_sub(
      holder.get("parts", ()), list(outs), exported, invals, "checkpoint"
    )

  def scan(self, eqn, invals) -> list:
    p = eqn.params
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    consts = invals[:n_consts]
    init = invals[n_consts : n_consts + n_carry]
    xs = invals[n_consts + n_carry :]
    jaxpr, jconsts = _open(p["jaxpr"])

    def body(use_token):
      def fn(carry, x):
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token)
        self.seed(ctx, consts, consts)
        outs = ctx.run(jaxpr, jconsts, [*consts, *carry, *x])
        new_carry, ys = outs[:n_carry], outs[n_carry:]
        if use_token:
          return (new_carry, self.loop_token(ctx, token)), ys
        return new_carry, ys

      return fn

    def run_loop(use_token, init_token=None):
      carry = (init, init_token) if use_token else init
      return jax.lax.scan(
        body(use_token),
        carry,
        xs,
        length=p["length"],
        reverse=p["reverse"],
        unroll=p.get("unroll", 1),
      )

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
    cond_native = _has_native_jaxpr(cjaxpr, self.decls)

    def run_loop(use_token, init_token=None):
      def cond_fn(carry):
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token)
        (pred,) = ctx.run(cjaxpr, cjconsts, [*cconsts, *carry])
        return pred

      def body_fn(carry):
        if use_token:
          carry, token = carry
        ctx = self.loop_child(use_token and token)
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

    return self.loop(
      analyse,
      run_loop,
      invals,
      "while_loop",
      split=len(init),
      extra_jaxprs=[cjaxpr],
    )

  def loop_child(self, token) -> _Context:
    if token is False or token is None:
      return self.child(accesses=[])
    bit = _new_bit()
    prev = _Access(bit, (_Part("write", None, "previous"),), [token], bit, "")
    ctx = self.child(accesses=[prev])
    ctx.set_dep(token, bit)
    return ctx

  def loop_token(self, ctx: _Context, token):
    """The order value out of a loop body: after every call of the body
    (which are all after `token`, the value that came in)."""
    exported = [w for w in self.exported(ctx) if w is not token]
    if not exported:
      return token
    return _token_of(exported, _aval(token), payload=token)

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
        bit = _new_bit()
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
        if not _conflicts(a.parts, j.parts, self.decls):
          continue
        if not any(
          (j.deps & cb) and (od & a.bit)
          for cb, od in zip(carry_bits, out_deps, strict=True)
        ):
          return parts, False, []
      # Before the loop: through the consts, or an initial carry.
      for p in self.accesses:
        if not _conflicts(p.parts, j.parts, self.decls):
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
      init_token = self.order_token(every or _ANY, aval)
      carry, ys = run_loop(True, init_token)
      carry, token = carry
      outs = list(carry) + list(ys)
      return self.after_sub(every or _ANY, outs, token, invals, label)
    carry, ys = run_loop(False)
    outs = list(carry) + list(ys)
    bits = 0
    for value in invals:
      bits |= self.dep(value)
    if parts:
      witnesses = [carry[k] for k in carrying if _size(carry[k]) > 0]
      access = self.summary(parts, witnesses, bits, label)
      for k in carrying:
        self.set_dep(carry[k], access.deps)
    for out in outs:
      self.set_dep(out, bits)
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
    token_in = self.order_token(parts or _ANY)
    holder = {}

    def body(token, *args):
      ctx = self.loop_child(token)
      outs = ctx.run(jaxpr, consts, list(args))
      holder["parts"] = _own_parts(ctx)
      return (*outs, self.token_after(ctx).reshape((1,)))

    mapped = jax.shard_map(
      body,
      mesh=mesh,
      in_specs=(jax.sharding.PartitionSpec(), *p["in_specs"]),
      out_specs=(*p["out_specs"], jax.sharding.PartitionSpec(axes)),
      axis_names=set(manual),
      check_vma=bool(p.get("check_vma", True)),
    )
    *outs, token = mapped(token_in, *invals)
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
    holder = {}
    token_in = self.order_token(self.sub_parts([closed.jaxpr]) or _ANY)

    def original(*args):
      return jax_compat.bind_equation(eqn, args)

    @jax.custom_jvp
    def fn(token, *args):
      ctx = self.loop_child(token)
      self.seed(ctx, args, invals)
      jaxpr, consts = _open(closed)
      outs = ctx.run(jaxpr, consts, list(args))
      holder["parts"] = holder.get("parts", ()) + _own_parts(ctx)
      return outs, self.token_after(ctx)

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

  def token_after(self, ctx: _Context):
    """An int32 value that comes after every call made in child `ctx`."""
    exported = self.exported(ctx)
    token = jnp.zeros((), jnp.int32)
    return entangle(token, *exported) if exported else token

  def custom_vjp(self, eqn, invals) -> list:
    """Rebuilds the custom_vjp around transformed functions: the primal,
    the forward pass and the backward pass (traced from ``jax.vjp`` of the
    original call, so that its rules are the user's), each ordered; the
    backward pass after the forward pass's calls."""
    closed = eqn.params["call_jaxpr"]
    n_out = len(closed.jaxpr.outvars)
    holder = {}
    token_in = self.order_token(self.sub_parts([closed.jaxpr]) or _ANY)

    def original(*args):
      return jax_compat.bind_equation(eqn, args)

    @jax.custom_vjp
    def fn(token, *args):
      ctx = self.loop_child(token)
      self.seed(ctx, args, invals)
      jaxpr, consts = _open(closed)
      outs = ctx.run(jaxpr, consts, list(args))
      holder["parts"] = holder.get("parts", ()) + _own_parts(ctx)
      return outs, self.token_after(ctx)

    def fwd(token, *args):
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
      return (outs[:n_out], token), (outs[n_out:], token)

    def bwd(res, cts):
      residuals, token = res
      cts = cts[0]
      treedef = holder["pullback"]

      def pull(r, c):
        return jax.tree_util.tree_unflatten(treedef, r)(c)

      traced = jax.make_jaxpr(pull)(list(residuals), list(cts))
      bit = _new_bit()
      prev = _Access(bit, _ANY, [token], bit, "forward pass")
      ctx = self.child(accesses=[prev])
      ctx.set_dep(token, bit)
      flat_in = jax.tree_util.tree_leaves((list(residuals), list(cts)))
      outs = ctx.run(traced.jaxpr, traced.consts, flat_in)
      return (np.zeros((), jax.dtypes.float0), *outs)

    fn.defvjp(fwd, bwd)
    outs, token = fn(token_in, *invals)
    return self.after_sub(
      holder.get("parts", ()), list(outs), token, invals, "custom_vjp"
    )


_ANY = (_Part("write", None, "any"),)


_RECORD = re.compile(r"entangle_jax:(?:read|write)(?::[^/()]*)?")


def _resource_record(name_stack: str):
  """``(mode, name)`` of the innermost ``Resource`` record in a forward
  pass's named scopes, or None (none, or a backward pass's copy)."""
  if access_marker.PREFIX not in name_stack or "transpose(" in name_stack:
    return None
  found = _RECORD.findall(name_stack)
  return access_marker.parse_component(found[-1]) if found else None


def _stacklevel() -> int:
  """The warning's stack level of the first frame outside this module and
  JAX: the user's line that called the transformed function."""
  frame, level = sys._getframe(1), 1
  while frame is not None:
    name = frame.f_globals.get("__name__", "")
    if not (name == __name__ or name.startswith(("jax.", "jax._src"))):
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


def _own_parts(ctx: _Context) -> tuple[_Part, ...]:
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
  return int(np.prod(np.shape(value)))


def _constant_array(value) -> np.ndarray | None:
  """`value` as a NumPy array, when it is a known integer array (a
  literal, a constant of the traced program) of at most 4096 elements."""
  if isinstance(value, Tracer):
    return None
  try:
    array = np.asarray(value)
  except Exception:  # Anything not concrete.
    return None
  if array.dtype.kind not in "iu" or array.size > 4096:
    return None
  return array


_VIEWS = (
  "slice",
  "squeeze",
  "reshape",
  "convert_element_type",
  "copy",
  "copy_p",
)


def _apply_view(eqn, array: np.ndarray) -> np.ndarray | None:
  """What `eqn` (one of `_VIEWS`) makes of `array`'s elements, or None."""
  name, params = eqn.primitive.name, eqn.params
  try:
    if name == "slice":
      strides = params.get("strides") or (1,) * array.ndim
      return array[
        tuple(
          slice(a, b, c)
          for a, b, c in zip(
            params["start_indices"],
            params["limit_indices"],
            strides,
            strict=True,
          )
        )
      ]
    if name == "squeeze":
      return np.squeeze(array, tuple(params["dimensions"]))
    if name == "reshape":
      return array.reshape(params["new_sizes"])
    if name == "convert_element_type":
      # Only to an integer type that holds every value: a narrowing one
      # could make two handles one.
      new = np.dtype(params["new_dtype"])
      if new.kind not in "iu" or not np.can_cast(array.dtype, new):
        return None
      return array.astype(new)
    return array
  except Exception:  # A view this does not follow: nothing is claimed.
    return None


def _orderable_operand(invals, object_index) -> int | None:
  candidates = [object_index] if object_index is not None else []
  candidates += range(len(invals))
  for index in candidates:
    if index < len(invals) and _size(invals[index]) > 0:
      return index
  return None


def _side_effecting(eqn) -> bool:
  name = eqn.primitive.name
  if name == "ffi_call":
    return bool(eqn.params.get("has_side_effect", False))
  return name != "pure_callback"


def _target_name(eqn) -> str | None:
  params = eqn.params
  for key in ("target_name", "call_target_name"):
    if key in params:
      return str(params[key])
  return None


def _native_call(eqn, decls: Declarations):
  """``(target, parts, object operand, returns_object)`` for a native call
  that in_program_order orders, else None."""
  name = eqn.primitive.name
  if name == "ffi_call":
    target = _target_name(eqn)
    if target is None or is_library_target(target):
      return None
    if target == names.ENTANGLE_TARGET:
      return None
    declared = decls.for_target(target)
  elif name in _HOST_CALLBACKS:
    target = name
    declared = decls.for_target(names.HOST_CALLBACK_PREFIXES[1] + "callback")
  else:
    return None
  if declared is None:
    return target, (_Part("write", None, target),), None, ()
  if declared.mode == "none":
    return None
  mode = declared.mode
  object_index = declared.object
  if object_index is not None and object_index >= len(eqn.invars):
    object_index = None
  obj_marker = None if object_index is None else _Obj()
  part = _Part(mode, obj_marker, target)
  return target, (part,), object_index, tuple(declared.returns_object)


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, tuple | list) else (value,):
      if isinstance(item, jex_core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jex_core.Jaxpr):
        yield item


def _all_eqns(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn
    for sub in _sub_jaxprs(eqn):
      yield from _all_eqns(sub)


def _has_native_jaxpr(jaxpr, decls, rules: bool = True) -> bool:
  """Whether `jaxpr` makes a native call, in a sub-jaxpr or (with `rules`)
  a custom differentiation rule included."""
  return any(
    _native_call(e, decls) is not None
    or (rules and _custom_rules_native(e, decls))
    for e in _all_eqns(jaxpr)
  )


def _has_native(eqn, decls) -> bool:
  if any(_has_native_jaxpr(j, decls) for j in _sub_jaxprs(eqn)):
    return True
  return _custom_rules_native(eqn, decls)


_RULES_CACHE: dict[int, tuple[Any, Declarations, bool]] = {}


def _custom_rules_native(eqn, decls) -> bool:
  """`_rules_have_native` for a custom_jvp or custom_vjp call, once per
  equation (loop bodies are traced more than once); False for others."""
  if eqn.primitive.name not in ("custom_jvp_call", "custom_vjp_call"):
    return False
  found = _RULES_CACHE.get(id(eqn))
  if found is not None and found[0] is eqn and found[1] == decls:
    return found[2]
  if len(_RULES_CACHE) > 1024:
    _RULES_CACHE.clear()
  result = _rules_have_native(eqn, decls)
  _RULES_CACHE[id(eqn)] = (eqn, decls, result)
  return result


def _rules_have_native(eqn, decls) -> bool:
  """Whether the differentiation rules of a custom_jvp or custom_vjp call
  (its JVP, its forward or backward pass) make a native call: traced as
  ``jax.jvp`` and ``jax.vjp`` of the call would run them."""
  avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
  floats = [jnp.issubdtype(a.dtype, jnp.inexact) for a in avals]

  def call(*args):
    return jax_compat.bind_equation(eqn, args)

  def differentiated(*args):
    def on_floats(*xs):
      it = iter(xs)
      full = [next(it) if f else a for a, f in zip(args, floats, strict=True)]
      return call(*full)

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
  return _has_native_jaxpr(traced.jaxpr, decls, rules=False)


def _ones_cotangent(out):
  if jnp.issubdtype(out.dtype, jnp.inexact):
    return jnp.ones_like(out)
  return np.zeros(out.shape, jax.dtypes.float0)


def _first_native(eqn, decls) -> str:
  for sub in _sub_jaxprs(eqn):
    for e in _all_eqns(sub):
      found = _native_call(e, decls)
      if found is not None:
        return found[0]
  return "a native call"
