"""The loop rules of the algebra (`algebra`) that `may_order.MayOrder`
evaluates a module with: what a loop body's parameter is, which state
elements the body hands back unchanged, how many times the loop runs
where the module says, and what each state element is after it. Split
from `algebra` by concern: these read a loop's state as a whole, the
others one op's leaves.
"""

from __future__ import annotations

import functools

from entangle_jax.testing._order.algebra import (
  Leaf,
  Value,
  as_leaf,
  each,
  is_integral,
  join,
  new_leaf,
  replace,
)


def body_parameter(
  state: Value, passed_on: frozenset, index: int, mark: int, path: tuple
) -> Value:
  """The body's parameter: each state element as `state` has it, marked
  as changing over the loop's iterations unless the body hands it back
  unchanged, and tagged with its path for `paths_passed_on` and `trips`."""
  if isinstance(state, tuple):
    return tuple(
      body_parameter(element, passed_on, index, mark, (*path, k))
      for k, element in enumerate(state)
    )
  if path in passed_on:
    return replace(state, origin=("state", index, path))
  if ("maybe", path) in passed_on:
    # Unchanged over the iterations, or changed: as unchanged for a call
    # XLA may hoist, but no constant to count trips with.
    origin = ("state", index, path)
    return replace(
      state,
      origin=origin,
      key=origin,
      lit=None,
      const=False,
      var=state.var & ~mark,
      parts=None if state.parts is None else (each(state),),
      layout=None,
    )
  origin = ("state", index, path)
  parts = None
  if state.parts is not None:
    one = each(state)
    parts = (new_leaf(one.deps, one.var | mark),)
  return new_leaf(
    state.deps, state.var | mark, False, None, origin, key=origin, parts=parts
  )


def paths_passed_on(root: Value, index: int, path: tuple):
  """The paths of the elements that the body's `root` hands back as the
  parameter had them, and ``("maybe", path)`` for those it may: where
  the body computes the element from itself and constants alone (``-(-c)``,
  ``c // 1``, ``sum(c[None])``), XLA's simplifier may fold that back to
  the element and take it as unchanged in the loop (and hoist what reads
  it), unless it steps by a constant."""
  if isinstance(root, tuple):
    for k, element in enumerate(root):
      yield from paths_passed_on(element, index, (*path, k))
  elif root.origin == ("state", index, path):
    yield path
  elif root.origin == ("maybe", index, path) or _from_itself(root, index, path):
    yield ("maybe", path)


def _from_itself(root: Leaf, index: int, path: tuple) -> bool:
  """Whether loop `index`'s body computes element `path` from that element
  and constants alone (as far as value numbers tell), so that it may be
  the element unchanged; not where it steps it by a constant that is not
  0 (a counter)."""
  origin = root.origin
  if origin is not None and origin[0] == "step" and origin[3] != 0:
    return False
  if root.key is None:
    return not root.deps  # No call of the body computes it: unknown.
  itself = ("state", index, path)
  if _mentions(root.key) <= {itself}:
    return True
  # A sum whose other terms cancel (``(c + i) - i``, ``c + helper(i, i)``
  # with a helper ``a - b``): XLA folds them away after inlining, and the
  # element is unchanged (skeptic pass 76g).
  terms = _integer_terms(root.key)
  left = {term for term, times in terms.items() if times}
  return bool(left) and all(_mentions(t) <= {itself} for t in left)


_SUM_OPERANDS = 7
"""Where a value number's operands start (`key_of`)."""


def _integer_terms(key: tuple) -> dict[tuple, int]:
  """An integer value number as a sum of terms with their multiplicities
  (``(c + i) - i`` is ``{c: 1, i: 0}``), through ``add``, ``subtract``
  and ``negate``; constants are left out (a step by one is no change of
  terms, which the caller's step rule tells). Walked with a stack of its
  own."""
  terms: dict[tuple, int] = {}
  todo = [(key, 1)]
  while todo:
    part, times = todo.pop()
    opcode = part[0] if part else None
    summed = (
      opcode in ("add", "subtract", "negate")
      and len(part) > _SUM_OPERANDS
      and isinstance(part[1], str)
      and is_integral(part[1])
    )
    if opcode == "c":
      continue
    if not summed:
      terms[part] = terms.get(part, 0) + times
      continue
    operands = part[_SUM_OPERANDS:]
    if opcode == "negate":
      todo.append((operands[0], -times))
    elif opcode == "add":
      todo += [(o, times) for o in operands]
    else:
      todo += [(operands[0], times), (operands[1], -times)]
  return terms


@functools.lru_cache(maxsize=65536)
def _mentions(key: tuple) -> frozenset:
  """The values a value number is computed from that are not constants:
  loop state elements, calls, entry parameters. Walked with a stack of
  its own, each shared part once: a number nests as deep as the chain of
  ops that computed it (a loop unrolled in Python)."""
  found: set = set()
  todo, seen = [key], set()
  while todo:
    part = todo.pop()
    if id(part) in seen:
      continue
    seen.add(id(part))
    if part and part[0] in ("state", "call", "entry", "maybe"):
      found.add(part)
    elif not (part and part[0] == "c"):
      todo.extend(p for p in part if isinstance(p, tuple))
  return frozenset(found)


def loop_state(
  initial: Value,
  root: Value,
  passed_on: frozenset,
  path: tuple,
  met: bool = False,
) -> Value:
  """A loop's state over every iteration: each element as computed from
  its initial value and the body's results for it; one the body hands
  back unchanged keeps its initial value. `met`: only what every
  iteration's holds, for the body's parameter (its first iteration sees
  the initial value alone; a loop of one trip that XLA inlines, only
  that), where otherwise what any iteration's holds."""
  if (
    isinstance(initial, tuple)
    and isinstance(root, tuple)
    and len(initial) == len(root)
  ):
    return tuple(
      loop_state(a, b, passed_on, (*path, k), met)
      for k, (a, b) in enumerate(zip(initial, root, strict=True))
    )
  if path in passed_on:
    return initial
  if ("maybe", path) in passed_on:
    # Its initial value, or what the body picks in its place: only what
    # both share, as the body's result already says.
    return replace(as_leaf(root), origin=None, const=False, lit=None, key=None)
  joined = join([initial, root])
  if not met:
    return replace(joined, const=False)
  a, b = as_leaf(initial), as_leaf(root)
  parts = None
  if joined.parts is not None:
    one, other = each(a), each(b)
    parts = (new_leaf(one.deps & other.deps, one.var | other.var),)
  return new_leaf(a.deps & b.deps, joined.var, False, parts=parts)


def trips(decision: Leaf, root: Value, initial: Value, index: int):
  """The trip count of a loop whose condition compares a counter with a
  constant (``i < n``), the body stepping the counter by a constant from a
  constant start; None for any other loop."""
  origin = decision.origin
  if origin is None or origin[0] != "below" or origin[1] != index:
    return None
  path, limit = origin[2], origin[3]
  counter, start = root, initial
  for k in path:
    if not isinstance(counter, tuple) or not isinstance(start, tuple):
      return None
    counter, start = counter[k], start[k]
  if not isinstance(counter, Leaf) or not isinstance(start, Leaf):
    return None
  step_origin = counter.origin
  if step_origin is None or step_origin[:3] != ("step", index, path):
    return None
  step, largest = step_origin[3], step_origin[4]
  if not start.const or not isinstance(start.lit, int) or step <= 0:
    return None
  if largest is None or limit + step > largest:
    return None  # The counter may wrap before it reaches the limit.
  # In integers: a float quotient rounds 2**63 + 1 to 2**63.
  return max(0, -((start.lit - limit) // step))


def at_most(merged: Value, initial: Value, inside: int) -> Value:
  """A loop's `merged` state where the loop may not run: each element
  keeps only what its `initial` value is computed from too, and the calls
  `inside` the body (which, where they ran, came before the result)."""
  if (
    isinstance(merged, tuple)
    and isinstance(initial, tuple)
    and len(merged) == len(initial)
  ):
    return tuple(
      at_most(m, a, inside) for m, a in zip(merged, initial, strict=True)
    )
  m, a = as_leaf(merged), as_leaf(initial)
  deps = m.deps & (a.deps | inside)
  # A constant where it ran no iteration, or where it ran one (XLA may
  # count the loop so and inline it): XLA may fold what reads it.
  const = m.const or a.const
  if m.parts is None and a.parts is None:
    return replace(m, deps=deps, const=const)
  one, first = each(m), each(a)
  inner = new_leaf(one.deps & (first.deps | inside), one.var, const)
  return replace(m, deps=deps, const=const, parts=(inner,), layout=None)


def after_trips(
  initial: Value,
  root: Value,
  passed_on: frozenset,
  path: tuple,
  once: bool = False,
) -> Value:
  """A loop's state once it has run one iteration or more (its trip
  count says so): each element as the body's last result has it (XLA may
  inline a loop that runs once, or unroll one, and keep only that); one
  the body hands back unchanged keeps its initial value. `once`: the loop
  runs once and `root` is its body's result on the initial value
  (`first_iteration`), so a constant's value is the one it has."""
  if (
    isinstance(initial, tuple)
    and isinstance(root, tuple)
    and len(initial) == len(root)
  ):
    return tuple(
      after_trips(a, b, passed_on, (*path, k), once)
      for k, (a, b) in enumerate(zip(initial, root, strict=True))
    )
  if path in passed_on:
    return initial
  # A constant stays one: XLA folds what it computes where it inlines the
  # loop (``fori_loop(0, 1, lambda i, c: c * 0, w)`` is 0).
  last = as_leaf(root)
  lit = last.lit if once and last.const else None
  return replace(last, const=last.const, origin=None, lit=lit)


def first_iteration(initial: Value, index: int, path: tuple) -> Value:
  """The body's parameter of loop `index` where it runs once: its
  initial value, constants and value numbers included (XLA inlines such a
  loop and folds what its constants make), each element tagged with its
  path for `paths_passed_on` and `trips`."""
  if isinstance(initial, tuple):
    return tuple(
      first_iteration(element, index, (*path, k))
      for k, element in enumerate(initial)
    )
  return replace(initial, origin=("state", index, path))
