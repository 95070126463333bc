"""What an evaluation of `in_program_order` knows of each value
(`ValueTable`): the native calls it comes after (as bits), the object it
names, what computes it (for a checkpoint that JAX's differentiation
recomputes), and which values the program uses. The evaluator
(`interpreter.Context`) keeps one table per evaluation; a child evaluation
of a sub-program starts from a copy of its parent's (`ValueTable.child`).

Every table knows a value by its id: each value it records is kept
(`keep`) to the end of the evaluation, so that no id is handed on to
another value."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from entangle_jax._src.program_order.touches import (
  Obj,
  apply_view,
  constant_array,
)
from entangle_jax._src.program_order.values import entangled, size


class ValueTable:
  """For each value of one evaluation: the calls it depends on (`dep`),
  the object it names (`root`) and what computes it (`key`)."""

  def __init__(self, keys: bool = True):
    # Whether values are keyed by what computes them (`keys`, `key`): only
    # a checkpoint that JAX's differentiation recomputes reads the keys,
    # and computing them for every equation of a long program costs as
    # much as the bookkeeping of its native calls.
    self.track_keys = keys
    # A view of a traced handle array (``slots[3]``): the view's equation
    # and the value it views, by the view's id; and, for calls that only
    # read, the handle arrays already entangled after a set of witnesses
    # (`shared_read`).
    self.viewed_from: dict[int, tuple[Any, Any]] = {}
    # What each view of an object names (`view`), and the views of an
    # entangled handle array already bound (`shared_read`).
    self.views: dict[Any, tuple[Any, Obj | None]] = {}
    self.constants: dict[Any, Obj] = {}  # By value (`root`).
    self.rebound: dict[Any, Any] = {}
    self.entangled_roots: dict[tuple[int, tuple[int, ...]], Any] = {}
    self.deps: dict[int, int] = {}
    # Values computed from a call's result through an equation that keeps
    # no order (``jnp.maximum(t, t)``): they come after no call (`dep` is
    # 0), yet are not independent of one (`flows`).
    self.tainted: set[int] = set()
    self.roots: dict[int, Obj] = {}
    self.used: set[int] = set()
    # What the program itself uses (the equations' operands and the
    # jaxprs' outputs), not the witnesses the transform adds.
    self.program_used: set[int] = set()
    self.keep: list[Any] = []
    # Native results by what computes them (`key`), for a checkpoint that
    # JAX's differentiation recomputes: it takes the result saved here,
    # since a native call made again would see a later state. Each key
    # holds every call made under it, with the Python lines that made it
    # (`call_site`): two reads of one handle around a write share a key,
    # and the recomputation is the one made where it was (`saved_for`).
    self.keys: dict[int, Any] = {}
    self.saved: dict[Any, list[tuple[Any, Any]]] = {}

  def child(self) -> ValueTable:
    """The table a child evaluation starts with: its parent's calls and
    objects of each value, copied (what the child learns stays its own),
    and the values kept, used, keyed and saved, shared."""
    table = ValueTable(self.track_keys)
    table.roots = dict(self.roots)
    table.deps = dict(self.deps)
    table.tainted = set(self.tainted)
    table.keep = self.keep
    table.used = self.used
    table.program_used = self.program_used
    table.keys = self.keys
    table.saved = self.saved
    return table

  def seed(self, child: ValueTable, inner: Sequence[Any], outer: Sequence[Any]):
    """In `child`, a sub-program's `inner` values stand for `outer` ones
    of this table."""
    for i, o in zip(inner, outer, strict=True):
      child.set_dep(i, self.dep(o))
      if id(o) in self.tainted:
        child.taint(i)
      child.set_root(i, self.root(o))
      if i is not o and self.track_keys:
        child.keys[id(i)] = self.key(o)

  def save(self, key: Any, site: Any, value: Any) -> None:
    """Notes `value`, the result of a native call computed by `key` and
    made at `site`, for a checkpoint's recomputation."""
    self.saved.setdefault(key, []).append((site, value))

  def saved_for(self, key: Any, site: Any) -> Any:
    """The result a recomputation computed by `key` at `site` takes: the
    one call made there under that key, or the only call made under it;
    None where several could be it (the call is then made again, in
    program order, rather than given another call's result)."""
    made = self.saved.get(key, [])
    here = [v for s, v in made if s == site]
    if len(here) == 1:
      return here[0]
    if not here and len({id(v) for _, v in made}) == 1:
      return made[0][1]
    return None

  def key(self, value: Any) -> Any:
    """What computes `value`: an equation and the keys of its inputs, or
    the value itself."""
    found = self.keys.get(id(value))
    if found is not None:
      return found
    self.keep.append(value)
    return ("value", id(value))

  def dep(self, value: Any) -> int:
    """The calls `value` comes after."""
    return self.deps.get(id(value), 0)

  def set_dep(self, value: Any, bits: int) -> None:
    """Records that `value` comes after the calls in `bits` too."""
    if bits:
      self.keep.append(value)
      self.deps[id(value)] = self.deps.get(id(value), 0) | bits

  def flows(self, value: Any) -> bool:
    """Whether `value` is computed from a call's result at all: it comes
    after a call, or is tainted by one (`taint`)."""
    key = id(value)
    return key in self.deps or key in self.tainted

  def taint(self, value: Any) -> None:
    """Records that `value` is computed from a call's result through data
    flow that orders nothing."""
    self.keep.append(value)
    self.tainted.add(id(value))

  def root(self, value: Any) -> Obj:
    """The object `value` names."""
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

  def set_root(self, value: Any, obj: Obj) -> None:
    """Records that `value` names `obj`."""
    self.keep.append(value)
    self.roots[id(value)] = obj

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
      params_key(eqn.params),
    )
    cached = self.views.get(key)
    if cached is not None and cached[0] is held:
      found = cached[1]
    else:
      # Computed once for each view of one object (a read of
      # ``slots[k % 64]`` 5,000 times takes 64 slices).
      found = _view_obj(eqn, obj)
      self.views[key] = (held, found)
    if found is None:
      return
    self.set_root(out, found)
    if found.key is not None and len(eqn.invars) == 1 and len(eqn.outvars) == 1:
      self.viewed_from[id(out)] = (eqn, operand)

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

  def shared_read(
    self, operand, values: list, stood: int, bind: Callable[[Any, list], list]
  ):
    """`operand` of a call that only reads, a view of a small traced handle
    array (``slots[k]``) or that array itself, computed again (by `bind`)
    from the array entangled after `values`; or None when it is neither.
    The entangled array is kept for the set of witnesses: later reads of
    any of its elements that must come after the same calls take it too,
    one entangle for them all, as by hand (`entangle(slots, w)` then the
    reads), where each read's own element would take one each. Only reads
    share: a later call that conflicts with a write comes after that
    write, so it waits for another set of witnesses. At most
    `SHARED_ROOT_LIMIT` elements: an entangle of an argument copies it
    (its result aliases its payload)."""
    chain = []
    value = operand
    while id(value) in self.viewed_from:
      eqn, value = self.viewed_from[id(value)]
      chain.append(eqn)
    root = value
    if (
      self.root(root).key is None
      or size(root) > SHARED_ROOT_LIMIT
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
      key = (id(tied), eqn.primitive, params_key(eqn.params))
      view = self.rebound.get(key)
      if view is None:
        view = bind(eqn, [tied])[0]
        self.view(eqn, tied, view)
        self.rebound[key] = view
        self.keep.append(tied)
      tied = view
    return tied


def _view_obj(eqn, obj: Obj) -> Obj | None:
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
  return Obj(key=obj.key, elements=elements, index=index, resource=obj.resource)


def literal_key(atom) -> Any:
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


def params_key(params) -> tuple:
  """`params` as a key: a value that cannot be hashed by its identity."""
  items = []
  for name, value in sorted(params.items()):
    try:
      hash(value)
    except TypeError:
      value = ("id", id(value))
    items.append((name, value))
  return tuple(items)


SHARED_ROOT_LIMIT = 4096
"""The most elements of a handle array that reads entangle whole
(`ValueTable.shared_read`), as a constant handle array is followed."""
