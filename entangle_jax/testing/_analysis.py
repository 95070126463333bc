"""Happens-before, exclusion and races on a compiled, optimized XLA module.

Which edges count is `entangle_jax.testing._edges`'s docstring. What is
concluded, given those edges:

* Op ``a`` happens before op ``b`` when a chain of counted edges leads from
  ``a`` (the end of its work) to ``b`` (the start of its work).
* Ops in nested computations (fusions, while/conditional bodies, calls,
  async computations, command buffers) are related through the
  instructions that call their computations: ``a`` inside a while loop
  happens before ``b`` after the loop when the while instruction reaches
  ``b``. Two ops in the same nested computation are related within it, that
  is within one loop iteration; the order between different iterations is
  not analysed.
* Ops in different computations of one instruction (a loop's condition and
  body, two branches of a conditional) and an op and the instruction that
  contains it are never concluded to be ordered.
* Ops in two different branches of one ``conditional`` instruction are
  **exclusive**: one execution of it runs one branch, so they are neither
  ordered nor racing, however deeply each is nested in its branch. An op in
  a branch and an op outside that conditional follow the rules above.
* A computation called from several places is concluded ordered (or
  exclusive) only if that holds at every call site.

Which ops a selector picks, and which ops ``races`` looks at by default, is
decided by `entangle_jax.testing._selectors`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from entangle_jax.testing import _hlo_parse, _selectors
from entangle_jax.testing._call_graph import CallGraph, CallPath
from entangle_jax.testing._edges import Dataflow
from entangle_jax.testing._module_text import CompiledModule, module_text
from entangle_jax.testing._ops import Op, Race
from entangle_jax.testing._selectors import Selector


class OrderAnalysis:
  """Ordering facts about one compiled module.

  Build it once and ask many questions; the module-level functions build
  one per call.

  Args:
    compiled: a ``jax.stages.Compiled``, a ``jax.stages.Lowered`` (compiled
      here) or the optimized HLO text.
    all_ops: let named-scope selectors pick every op in the scope
      (arithmetic, fusions, copies...), not only effectful work
      (`is_effectful`). Target selectors are unaffected.
  """

  def __init__(self, compiled: CompiledModule, *, all_ops: bool = False):
    module = _hlo_parse.parse(module_text(compiled))
    self._all_ops = all_ops
    self._dataflow = Dataflow(module)
    self._calls = CallGraph(module, self._instructions(), self.op)

  # Selection ----------------------------------------------------------------

  def select(self, selector: Selector) -> list[str]:
    """Names of the ops `selector` picks, in module text order.

    A selector picks custom calls whose target equals it and, by name of a
    ``jax.named_scope`` (`scope_matches`), the effectful work in that scope
    (`is_effectful`), or every op there with ``all_ops=True``.

    Raises:
      TypeError: `selector` is not a string.
      ValueError: `selector` is empty, or picks nothing; the message lists
        the targets and scopes that exist.
    """
    return [op.name for op in self.select_ops(selector)]

  def select_ops(self, selector: Selector) -> list[Op]:
    """The `Op` objects `selector` picks; see `select`."""
    _selectors.check_selector(selector)
    instructions = self._instructions()
    found = [
      self.op(i)
      for i in instructions
      if _selectors.picks(selector, i, self._all_ops)
    ]
    if not found:
      raise ValueError(
        _selectors.no_match_message(selector, instructions, self._all_ops)
      )
    return list(dict.fromkeys(found))

  def effectful_ops(self) -> list[Op]:
    """Every op `is_effectful` accepts, once each, in module text order."""
    ops = (
      self.op(i) for i in self._instructions() if _selectors.is_effectful(i)
    )
    return list(dict.fromkeys(ops))

  def user_native_calls(self) -> list[Op]:
    """The ops ``races`` looks at by default (`is_user_native_call`)."""
    ops = (
      self.op(i)
      for i in self._instructions()
      if _selectors.is_user_native_call(i)
    )
    return list(dict.fromkeys(ops))

  def empty_witness_entangles(self) -> list[Op]:
    """Entangle calls whose witnesses are all zero-size: they order nothing.

    A zero-size array holds no bytes. XLA replaces a zero-size value that no
    side effect produces by an empty constant, so the witness's producer is
    no longer an operand at all; and an empty buffer conflicts with nothing,
    so no runtime orders on it.
    """
    return [
      self.op(i)
      for i in self._instructions()
      if self._dataflow.has_only_empty_witnesses(i)
    ]

  def op(self, instruction: _hlo_parse.Instruction) -> Op:
    """The `Op` that `instruction` is part of (an async pair, or itself)."""
    first, last = self._dataflow.span(instruction)
    computation = instruction.computation
    first_instruction = self._dataflow.by_name[(computation, first)]
    return Op(computation, first, last, first_instruction)

  def call_paths(self, op: Op) -> list[CallPath]:
    """Chains of call sites from the entry computation down to `op`."""
    return self._calls.call_paths(op)

  def _instructions(self) -> Iterable[_hlo_parse.Instruction]:
    return self._dataflow.by_name.values()

  # Questions ----------------------------------------------------------------

  def happens_before(self, before: Selector, after: Selector) -> bool:
    """True iff every op `before` selects precedes every op `after` selects."""
    return not self.unordered(before, after)

  def unordered(self, before: Selector, after: Selector) -> list[Race]:
    """Pairs ``(a, b)`` of selected ops where ``a`` does not precede ``b``."""
    firsts, seconds = self.select_ops(before), self.select_ops(after)
    return [
      Race(a, b) for a in firsts for b in seconds if not self.precedes(a, b)
    ]

  def ops_among(self, among: Sequence[Selector] | None = None) -> list[Op]:
    """The ops that ``races(among)`` and ``order_graph`` look at.

    Args:
      among: selectors; by default the user's native calls
        (`user_native_calls`).

    Returns:
      Each selected op once, in selector order (module text order within
      one selector), however many selectors pick it.

    Raises:
      TypeError: `among` is a string, or not an iterable of selectors.
      ValueError: a selector is empty or picks nothing.
    """
    if among is None:
      return self.user_native_calls()
    _selectors.check_among(among)
    return list(dict.fromkeys(op for s in among for op in self.select_ops(s)))

  def races(self, among: Sequence[Selector] | None = None) -> list[Race]:
    """Pairs of ops that may run in either order (`is_race`).

    Args:
      among: selectors choosing the ops (`ops_among`); by default the
        user's native calls (`user_native_calls`).

    Returns:
      `Race` pairs, in the order of `ops_among`.

    Raises:
      TypeError: `among` is a string rather than a sequence of selectors.
    """
    pairs = itertools.combinations(self.ops_among(among), 2)
    return [Race(a, b) for a, b in pairs if self.is_race(a, b)]

  def is_race(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` may run in either order.

    That is: neither `precedes` the other, and they are not `exclusive`.
    """
    return not (
      self.precedes(a, b) or self.precedes(b, a) or self.exclusive(a, b)
    )

  # Reachability -------------------------------------------------------------

  def precedes(self, a: Op, b: Op) -> bool:
    """Whether the work of `a` ends before the work of `b` begins."""
    paths_a, paths_b = self.call_paths(a), self.call_paths(b)
    if not paths_a or not paths_b:
      return False  # Too many call sites to conclude anything.
    return all(self._path_precedes(pa, pb) for pa in paths_a for pb in paths_b)

  def _path_precedes(self, pa, pb) -> bool:
    for x, y in zip(pa, pb, strict=False):
      if x.computation != y.computation:
        return False  # Different computations of one caller.
      if x.name != y.name:
        return self._dataflow.reaches(x.computation, x.last, y.name)
    return False  # One contains the other, or they are the same op.

  def exclusive(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` never both run in one execution of a conditional.

    True when, at every pair of their call sites, they lie in different
    branch computations of the same ``conditional`` instruction (however
    deeply nested inside those branches): one execution of it runs one
    branch. Such ops are neither ordered (`precedes` is False both ways) nor
    racing (`is_race` is False). Relative to ops outside that conditional,
    and in different executions of it (loop iterations), the usual rules
    apply.
    """
    paths_a, paths_b = self.call_paths(a), self.call_paths(b)
    if not paths_a or not paths_b:
      return False  # Too many call sites to conclude anything.
    return all(self._path_exclusive(pa, pb) for pa in paths_a for pb in paths_b)

  def _path_exclusive(self, pa, pb) -> bool:
    for depth, (x, y) in enumerate(zip(pa, pb, strict=False)):
      if x.computation != y.computation:
        # Paths start in the entry computation, so they part below a common
        # call site: a conditional runs one of the two computations.
        return depth > 0 and pa[depth - 1].instruction.opcode == "conditional"
      if x.name != y.name:
        return False  # Two ops of one computation.
    return False  # One contains the other, or they are the same op.
