"""Which elements a slice takes and an update writes: the parts of a
value whose elements differ (`algebra.Leaf.parts`), told apart by the
index of each element where the program says which part it belongs to
(`algebra.Leaf.layout`).

XLA folds a slice of a concatenate, or of an update at constant indices,
into the part it takes; so a slice is computed only from the parts of the
elements it takes, and, where those cannot be told, only from what every
part shares.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import re
from collections.abc import Callable

from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._hlo.instruction import dims_of
from entangle_jax.testing._order.algebra import (
  DATA_OPERANDS,
  Leaf,
  Value,
  as_leaf,
  common,
  each,
  join,
  key_of,
  new_leaf,
  replace,
  shaped,
  tuple_arity,
  varying,
)

SLICE_ELEMENTS_READ = 4096
"""The most elements of a slice whose parts are found element by element;
a larger slice of a concatenate keeps only what all its parts share."""


def sliced(
  whole: Leaf,
  dims: tuple[int, ...] | None,
  region: tuple[tuple[int, int, int], ...] | None,
) -> Leaf:
  """A slice of `whole` (an array of `dims` whose elements differ) that
  takes `region`, a ``(start, limit, stride)`` per dimension: XLA folds a
  slice of a concatenate or of an update to the parts it takes, so it is
  computed from those alone (`elements_of`). Where the parts it takes
  cannot be told (no region, too many elements), only what any element
  surely has."""
  if whole.parts is None:
    return whole
  if region is None or dims is None or len(region) != len(dims):
    return each(whole)
  cells = cells_of(dims, region)
  if cells is None or math.prod(dims) != (whole.layout or (0,))[-1]:
    return each(whole)
  return elements_of(whole, cells)


def elements_of(leaf: Leaf, cells: frozenset) -> Leaf:
  """What the elements of `leaf` at row-major indices `cells` are computed
  from: the parts of `leaf` they lie in (`Leaf.layout`), each part's
  whole where they are all of it, else the part's own elements at their
  indices in it, and so on into nested parts; only what any element
  surely has where the layout does not say."""
  if not cells:
    return Leaf(const=True)  # No element: XLA makes it a constant.
  if leaf.parts is None:
    return leaf
  layout = leaf.layout
  if layout is None or max(cells) >= layout[-1]:
    return each(leaf)
  found = []
  for part, local, everything in _by_part(layout, cells):
    inner = leaf.parts[part]
    if everything and layout[0] == "joined":
      found.append(inner)  # A concatenate's operand, whole: itself.
    elif local is None:
      # Elements an update wrote, some perhaps written over by others.
      found.append(each(inner))
    else:
      found.append(elements_of(inner, local))
  if len(found) == 1:
    return found[0]
  return replace(join(found), parts=tuple(found), layout=None)


def _by_part(
  layout: tuple, cells: frozenset
) -> list[tuple[int, frozenset | None, bool]]:
  """The parts that `cells` lie in, each with their indices in that part
  (None for an update's written part, whose indices are not followed) and
  whether they are all of the part's elements."""
  count = layout[-1]
  if layout[0] == "cells":
    written = layout[1]
    inside = cells & written
    out: list[tuple[int, frozenset | None, bool]] = []
    if cells - written:
      # The base's elements keep their indices.
      out.append(
        (0, cells - written, len(cells - written) == count - len(written))
      )
    if inside:
      out.append((1, None, inside == written))
    return out
  inner, sizes, count = layout[1], layout[2], layout[3]
  bounds = [0, *itertools.accumulate(sizes)]
  joined = bounds[-1]
  steps = count // (inner * joined) if inner and joined else 0
  groups: dict[int, set[int]] = {}
  for flat in cells:
    step, rest = divmod(flat, inner * joined)
    along, within = divmod(rest, inner)
    part = bisect.bisect_right(bounds, along) - 1
    local = (step * sizes[part] + along - bounds[part]) * inner + within
    groups.setdefault(part, set()).add(local)
  return [
    (part, frozenset(local), len(local) == steps * sizes[part] * inner)
    for part, local in sorted(groups.items())
  ]


def updated(
  base: Leaf, update: Leaf, dims: tuple[int, ...], cells: frozenset
) -> Leaf:
  """`base` (an array of `dims`) with the elements of indices `cells`
  replaced by elements computed from `update`."""
  count = math.prod(dims)
  if not cells:
    return base
  if len(cells) == count:
    return replace(update, layout=None)
  return replace(
    join([base, update]),
    parts=(base, update),
    layout=("cells", cells, count),
  )


def cells_of(
  dims: tuple[int, ...], region: tuple[tuple[int, int, int], ...]
) -> frozenset | None:
  """The row-major indices of the elements of `region` in an array of
  `dims`; None where there are too many to list."""
  ranges = [range(start, limit, stride) for start, limit, stride in region]
  if math.prod(len(r) for r in ranges) > SLICE_ELEMENTS_READ:
    return None
  strides = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
  return frozenset(
    sum(i * s for i, s in zip(index, strides, strict=True))
    for index in itertools.product(*ranges)
  )


def concatenated(
  operands: list[Value],
  operand_dims: list[tuple[int, ...] | None],
  dims: tuple[int, ...] | None,
  dimension: int | None,
) -> Leaf:
  """A ``concatenate`` of `operands` (of `operand_dims`) along
  `dimension` into an array of `dims`: computed from all of them, each
  element from one of them."""
  parts = tuple(as_leaf(o) for o in operands)
  layout = None
  if (
    dims is not None
    and dimension is not None
    and dimension < len(dims)
    and all(d is not None and len(d) == len(dims) for d in operand_dims)
  ):
    sizes = tuple(d[dimension] for d in operand_dims if d is not None)
    if sum(sizes) == dims[dimension]:
      inner = math.prod(dims[dimension + 1 :])
      layout = ("joined", inner, sizes, math.prod(dims))
  return replace(join(operands), parts=parts, layout=layout)


def region_at(
  starts: list[Value],
  sizes: tuple[int, ...] | None,
  dims: tuple[int, ...] | None,
) -> tuple[tuple[int, int, int], ...] | None:
  """The elements of an array of `dims` that a dynamic slice or update
  of `sizes` at `starts` takes, where the starts are constants this
  module can read (clamped into the array, as XLA does); None
  otherwise."""
  if dims is None or sizes is None or len(starts) != len(dims):
    return None
  region = []
  for start, size, dim in zip(starts, sizes, dims, strict=True):
    lit = as_leaf(start).lit
    if not isinstance(lit, int) or isinstance(lit, bool):
      return None
    first = min(max(lit, 0), dim - size)
    region.append((first, first + size, 1))
  return tuple(region)


def _counts_rows(root: Value, initial: Value, path: int) -> bool:
  """Whether a loop's state element `path` starts at 0 and steps by 1."""
  if not isinstance(root, tuple) or not isinstance(initial, tuple):
    return False
  if path >= len(root) or path >= len(initial):
    return False
  counter, start = root[path], initial[path]
  if not isinstance(counter, Leaf) or not isinstance(start, Leaf):
    return False
  step = counter.origin
  return (
    start.lit == 0
    and not isinstance(start.lit, bool)
    and step is not None
    and step[:3] == ("step", step[1], (path,))
    and step[3] == 1
  )


def scattered(
  scatter_dims: tuple | None,
  literal: str | None,
  index_dims: tuple[int, ...],
  dims: tuple[int, ...],
) -> frozenset | None:
  """The row-major indices of the elements of an array of `dims` that a
  scatter of single elements writes, its indices the constant `literal`
  (of `index_dims`); an index out of bounds writes nothing. None for a
  scatter of windows, or indices this module cannot read."""
  every = tuple(range(len(dims)))
  if scatter_dims is None or scatter_dims[:3] != ((), every, every):
    return None
  vector = scatter_dims[3]
  if vector == len(index_dims) - 1 and index_dims[-1] == len(dims):
    width = len(dims)
  elif vector == len(index_dims) and len(dims) == 1:
    width = 1
  else:
    return None
  numbers = [int(n) for n in re.findall(r"-?\d+", literal or "")]
  if len(numbers) != math.prod(index_dims):
    return None
  strides = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
  cells = set()
  for first in range(0, len(numbers), width):
    point = numbers[first : first + width]
    if all(0 <= p < d for p, d in zip(point, dims, strict=True)):
      cells.add(sum(p * s for p, s in zip(point, strides, strict=True)))
  return frozenset(cells)


def stacked(
  whole: Leaf,
  base: Leaf,
  operands: list[Value],
  update: Leaf,
  dims: tuple[int, ...] | None,
  taken: tuple[int, ...] | None,
) -> Leaf:
  """`whole`, a dynamic update (of `operands`) of a loop's state element
  `base` with `update` (of dims `taken`) at the loop's counter along the
  first dimension, as ``scan`` stacks its outputs: marked so that the loop
  can tell which iteration wrote each row (`rows_written`)."""
  origin = base.origin
  if (
    origin is None
    or origin[0] != "state"
    or not dims
    or taken is None
    or taken != (1, *dims[1:])
    or len(operands) != 2 + len(dims)
  ):
    return whole
  counter = as_leaf(operands[2]).origin
  if counter is None or counter[:2] != ("state", origin[1]):
    return whole
  if any(as_leaf(o).lit != 0 for o in operands[3:]):
    return whole
  return replace(
    whole, origin=("stacked", origin[1], origin[2], counter[2], update)
  )


@dataclasses.dataclass(frozen=True)
class Rows:
  """A loop whose trip count is known, for `rows_written`."""

  shape: str
  """The loop's state shape."""
  trips: int
  index: int
  """The loop's number (`MayOrder.loops`)."""
  inside: int
  """The calls in its body, as bits."""


def rows_written(
  merged: Value, root: Value, initial: Value, rows: Rows
) -> Value:
  """The loop's `merged` state, where the body stacks a value into an
  element at the counter (`stacked`), the counter runs from 0 by 1, and
  the loop runs once per row: each row then holds what one iteration
  wrote, and only the last row what the last iteration wrote. So a slice
  of the last row is computed from the body's calls, and a slice of
  another row only from what the body's calls did not compute (it came
  before their later iterations)."""
  shapes = tuple_arity(rows.shape)
  if (
    not isinstance(merged, tuple)
    or not isinstance(root, tuple)
    or not isinstance(initial, tuple)
    or shapes is None
    or len(shapes) != len(merged)
  ):
    return merged
  found = list(merged)
  for k, element in enumerate(root):
    origin = element.origin if isinstance(element, Leaf) else None
    if origin is None or origin[:3] != ("stacked", rows.index, (k,)):
      continue
    counter = origin[3]
    if len(counter) != 1 or not _counts_rows(root, initial, counter[0]):
      continue
    dims = dims_of(shapes[k].strip())
    if not dims or dims[0] != rows.trips:
      continue
    last = origin[4]
    one = each(last)
    earlier = new_leaf(one.deps & ~rows.inside, one.var, one.const)
    count = math.prod(dims)
    layout = ("joined", math.prod(dims[1:]), (rows.trips - 1, 1), count)
    found[k] = replace(as_leaf(found[k]), parts=(earlier, last), layout=layout)
  return tuple(found)


def indexed(
  i: Instruction,
  operands: list[Value],
  dims_of: Callable[[str], tuple[int, ...] | None],
  sets: bool,
  starts_of: Callable[[str, int, int], frozenset[int]] | None = None,
) -> Value:
  """A dynamic slice, gather, dynamic update or scatter `i` of
  `operands`, where `dims_of` gives an instruction's dimensions, `sets`
  says whether a scatter's combiner returns the update (a set), and
  `starts_of(name, low, high)` the values instruction `name` surely takes
  once clamped into ``[low, high]`` (`index_values`).

  Its indices order nothing (XLA drops an index that cannot change the
  result), except an index that surely picks two different values of a
  table this module reads. Where an index changes over a loop's
  iterations, so do the elements it picks (unless they are all alike),
  and no compiler may move the result out of that loop."""
  opcode = i.opcode
  at = DATA_OPERANDS[opcode](len(operands))
  data = [as_leaf(operands[k]) for k in at]
  moving = 0
  for k, operand in enumerate(operands):
    if k not in at:
      moving |= as_leaf(operand).var
  base, key = data[0], key_of(i, operands)
  dims = dims_of(i.operands[0])
  slicing = opcode in ("dynamic-slice", "gather")
  taken = i.dims if slicing else dims_of(i.operands[1])
  # Of a one-dimensional array (as indexed: a reshape keeps the value's
  # number), elements that differ anywhere differ along the one dimension
  # the index moves in. Of more dimensions, a broadcast or a stack of one
  # array repeats it along the dimension an index may move in (the rows
  # of ``broadcast_to(arange(3), (4, 3))`` are alike).
  flat = dims is not None and len(dims) == 1
  alike = (
    (base.const and base.lit is not None)
    or (
      base.key is not None
      and base.key[0] == "broadcast"
      and not (flat and _differing(base.key, None))
    )
    or _one_value(base.parts, base.layout, flat)
  )
  if alike or (dims is not None and taken == dims):
    # All elements alike (a broadcast of one value), or all of them
    # taken or updated: the index changes nothing.
    moving = 0
  if slicing:
    found = join([base])
    if starts_of is not None and _picks_by_index(i, base, dims, starts_of):
      # Two starts surely pick two values: no compiler may drop the
      # index, so the result is computed from it too (``table[abs(w) %
      # 3]`` of a table whose elements differ; skeptic pass 76f).
      found = join([base, operands[1]])
    if base.parts is not None:
      region = None
      if opcode == "dynamic-slice":
        region = region_at(operands[1:], i.dims, dims)
      elif dims is not None:
        region = _gathered_point(i, operands, dims)
      found = sliced(base, dims, region)
    found = varying(found, moving)
    return shaped(i.shape, replace(found, key=key))
  if opcode == "dynamic-update-slice" and len(data) == 2:
    update = data[1]
    if dims is not None and taken == dims:
      return update  # It covers the whole operand: XLA folds it so.
    region = region_at(operands[2:], taken, dims)
    cells = None
    if region is not None and dims is not None:
      cells = cells_of(dims, region)
    if cells is not None and dims is not None:
      whole = updated(base, update, dims, cells)
    else:
      whole = replace(join(data), parts=(base, update), layout=None)
    whole = stacked(whole, base, operands, update, dims, taken)
    return varying(replace(whole, key=key), moving)
  if len(data) == 2 and dims is not None:
    cells = _scattered(i, operands, dims, dims_of)
    if cells is not None:
      update = data[1]
      if not sets:
        update = join([base, update])
      whole = updated(base, update, dims, cells)
      return replace(whole, key=key)
  # A scatter: an update may land out of bounds and be dropped, or cover
  # every element, so only what the inputs and updates share surely
  # reaches the result.
  whole = replace(common(tuple(data)), parts=tuple(data), key=key)
  return shaped(i.shape, varying(whole, moving))


def _scattered(
  i: Instruction,
  operands: list[Value],
  dims: tuple[int, ...],
  dims_of: Callable[[str], tuple[int, ...] | None],
) -> frozenset | None:
  """The elements a scatter of single elements writes, where its
  indices are a constant this module can read; None otherwise."""
  key = as_leaf(operands[1]).key
  index_dims = dims_of(i.operands[1])
  if key is None or key[0] != "c" or index_dims is None:
    return None
  return scattered(i.scatter_dims, key[1], index_dims, dims)


def _one_value(
  parts: tuple | None, layout: tuple | None = None, flat: bool = False
) -> bool:
  """Whether `parts` (a concatenate's, of `layout`) all hold one value
  number whose elements may be alike, or are constants of one value read
  here: every element then alike (``stack([s, s])``, ``stack([s % 1] *
  3)``, which XLA folds to zeros; skeptic pass 76g). Parts that are one
  array whose own elements differ, joined into a `flat` (one-dimensional)
  array (``concatenate([arange(3)] * 2)``), are not: an index that
  changes picks other values."""
  if not parts:
    return False
  keys = {part.key for part in parts}
  if len(keys) == 1 and None not in keys:
    return not (flat and _differing(parts[0].key, _part_count(layout, 0)))
  if not all(part.const and part.parts is None for part in parts):
    return False
  if any(part.lit is None for part in parts):
    return False  # An array literal (``arange(3)``) has its own elements.
  return len({repr(part.lit) for part in parts}) == 1


def _gathered_point(
  i: Instruction, operands: list[Value], dims: tuple[int, ...]
) -> tuple[tuple[int, int, int], ...] | None:
  """The element a gather of one element takes (``jnp.take(x, 1)``: no
  offset dims, every dim collapsed, one index), where its index is a
  constant this module can read, clamped into the operand as XLA does;
  None for any other gather."""
  every = tuple(range(len(dims)))
  if i.gather_dims is None or len(operands) != 2:
    return None
  offsets, collapsed, index_map, sizes, _ = i.gather_dims
  if offsets or collapsed != every or index_map != every:
    return None
  if sizes != (1,) * len(dims) or i.dims != ():
    return None
  lit = as_leaf(operands[1]).lit  # Every coordinate that one value.
  if not isinstance(lit, int) or isinstance(lit, bool):
    return None
  return tuple(
    (min(max(lit, 0), d - 1), min(max(lit, 0), d - 1) + 1, 1) for d in dims
  )


_DISTINCT_IOTA = 256
"""The longest ``iota`` whose elements are taken as all different: each
integer type of 8 bits or more, and each float type of 16 bits or more,
holds 0 to 255 apart (8-bit integers wrap only beyond)."""

_IOTA_TYPES = frozenset(
  {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"}
  | {"f16", "bf16", "f32", "f64"}
)
"""The element types `_DISTINCT_IOTA` holds for (no ``pred``, no 8-bit
float)."""


def _differing(key: tuple | None, count: int | None) -> bool:
  """Whether the value of number `key` (of `count` elements) surely has
  two elements that differ: a one-dimensional ``iota`` of two or more, or
  a constant literal that lists two different numbers, or a broadcast or
  a conversion of one (a broadcast repeats every element; a conversion
  keeps 0 and 1 apart, which every ``iota`` starts with). False where
  that cannot be told."""
  while (
    key is not None and key[0] in ("convert", "broadcast") and len(key) == 3
  ):
    if key[0] == "convert" and key[2] is not None and key[2][0] == "c":
      return False  # A literal converted may merge its numbers.
    key = key[2]
  if key is None or (count is not None and count < 2):
    return False
  return _distinct(key) is not None


def _distinct(key: tuple | None) -> int | None:
  """The number of elements of the value of number `key` where they surely
  all differ from one another: a one-dimensional
  ``iota`` of a type that holds each of its numbers apart, or a constant
  literal of as many different numbers as elements. None otherwise."""
  table = _table(key)
  if table is None or len(set(table)) != len(table):
    return None
  return len(table)


def _table(key: tuple | None) -> tuple[float, ...] | None:
  """The elements of the value of number `key`, in order, where this
  module reads each: a one-dimensional ``iota`` of a type that holds each
  of its numbers apart, or a constant literal of two or more numbers
  (``[0, 0, 1]``, whose elements repeat, too). None otherwise."""
  if key is None or len(key) < 3:
    return None
  if key[0] == "iota" and isinstance(key[1], str):
    shape = key[1]
    found = dims_of(shape)
    if (
      found is None
      or len(found) != 1
      or not 2 <= found[0] <= _DISTINCT_IOTA
      or shape.split("[", 1)[0].strip() not in _IOTA_TYPES
    ):
      return None
    return tuple(float(n) for n in range(found[0]))
  if key[0] == "c" and isinstance(key[1], str) and isinstance(key[2], str):
    numbers = re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", key[1])
    found = dims_of(key[2])
    if found is None or len(numbers) != math.prod(found):
      return None  # Not every element read (``nan``, ``inf``, a tuple).
    if len(numbers) < 2:
      return None
    # -0 and 0 are one float: elements XLA may take for equal stay so.
    return tuple(float(n) for n in numbers)
  return None


def _part_count(layout: tuple | None, part: int) -> int | None:
  """How many elements part `part` of a concatenate of `layout` holds;
  None where the layout does not say."""
  if layout is None or layout[0] != "joined":
    return None
  _, _, sizes, count = layout
  joined = sum(sizes)
  if not joined or part >= len(sizes):
    return None
  return count // joined * sizes[part]


def _picks_by_index(
  i: Instruction,
  base: Leaf,
  dims: tuple[int, ...] | None,
  starts_of: Callable[[str, int, int], frozenset[int]],
) -> bool:
  """Whether dynamic slice or gather `i` of `base`, a one-dimensional
  array of `dims` whose elements this module reads (`_table`), surely
  picks two different values: its one index surely takes two starts once
  clamped (`starts_of`, the starts it surely takes), and the elements at
  two of them differ (``[0, 0, 1][abs(w) % 3]`` takes 0 and 1; of
  ``[0, 0, 1][abs(w) % 2]`` both are 0, which XLA may fold). A dynamic
  slice of fewer elements than the array (its windows compared), or a
  gather of one element."""
  if dims is None or len(dims) != 1 or len(i.operands) != 2:
    return False
  table = _table(base.key)
  if table is None or len(table) != dims[0]:
    return False
  if i.opcode == "dynamic-slice":
    if i.dims is None or len(i.dims) != 1:
      return False
    size = i.dims[0]
  else:
    if i.gather_dims is None:
      return False
    offsets, collapsed, index_map, sizes, _ = i.gather_dims
    if offsets or collapsed != (0,) or index_map != (0,) or sizes != (1,):
      return False
    size = 1
  starts = starts_of(i.operands[1], 0, dims[0] - size)
  windows = {table[start : start + size] for start in starts}
  return len(windows) > 1
