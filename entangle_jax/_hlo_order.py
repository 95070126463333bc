"""Happens-before and races on a compiled, optimized XLA module.

Which edges count. Only edges the XLA runtimes honour:

* **Operand edges** (data dependencies). XLA:CPU runs thunks concurrently
  on an execution graph built only from their buffer and resource uses
  (``xla/backends/cpu/runtime/thunk_executor.cc``), and GPU command buffers
  in concurrent mode derive their dependencies from buffer uses as well; a
  value one op produces and another reads is a buffer conflict on every
  backend. Through ``tuple``/``get-tuple-element`` only the element that is
  read counts. Edges through zero-sized values do not count: an empty
  buffer slice overlaps, so conflicts with, nothing
  (``BufferAllocation::Slice::OverlapsWith`` in
  ``xla/service/buffer_assignment.h``), and XLA usually replaces a
  zero-size value with an empty constant anyway.
* **Into a while loop**, only the state elements its body or condition
  read: XLA:CPU runs the loop as one thunk whose buffer uses are those of
  the thunks inside (``xla/backends/cpu/runtime/while_thunk.cc``), so an
  element carried through unchanged orders nothing; reading it after the
  loop depends on its producer, not on the loop.
* **Not control predecessors.** They constrain XLA's scheduler, not the
  CPU runtime's execution graph, so a ``control-predecessors={...}`` edge
  alone orders nothing here.
* **Async pairs** (``*-start`` ... ``*-done``, ``send``/``send-done``,
  ``recv``/``recv-done``, ``async-start``/``async-update``/``async-done``)
  are one piece of work that begins at the start and ends at the done: an op
  precedes it when it precedes the start, and it precedes an op when the
  done does. Ops that depend on the start alone may overlap it.

What is concluded, given those edges:

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
decided by `is_effectful` and `is_user_native_call`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Iterable, Sequence

import jax

from entangle_jax import _hlo_parse, _native_loader

Selector = str
_PATH_LIMIT = 64

EFFECTFUL_OPCODES = frozenset(
  {
    "send",
    "send-done",
    "recv",
    "recv-done",
    "infeed",
    "outfeed",
    "all-reduce",
    "all-reduce-start",
    "all-reduce-done",
    "all-gather",
    "all-gather-start",
    "all-gather-done",
    "all-to-all",
    "ragged-all-to-all",
    "reduce-scatter",
    "collective-broadcast",
    "collective-permute",
    "collective-permute-start",
    "collective-permute-done",
    "rng",
    "rng-get-and-update-state",
  }
)
"""Opcodes with effects beyond their result: communication, I/O, state."""

LIBRARY_TARGET_PREFIXES = (
  "lapack_",  # jnp.linalg / lax.linalg on CPU
  "ducc_",  # FFT on CPU (older jaxlib)
  "dynamic_ducc_",
  "cusolver",  # lax.linalg on CUDA
  "cublas",
  "__cublas$",  # XLA:GPU's GEMMs
  "__cudnn$",
  "cu_",  # jaxlib's CUDA kernels (threefry, LU pivots)
  "hipsolver",
  "hipblas",
  "hip_",
  "__gpu$",  # XLA:GPU's own custom calls
  "__triton",  # Pallas/Triton kernels: pure functions of their buffers
  "mosaic_gpu",
  "tpu_custom_call",
  "__onednn$",
  "xla_python_",  # host callbacks, ordered by JAX's own tokens
  "xla_ffi_python_",
  "xla.",
)
"""Custom-call target prefixes of JAX's and XLA's own library kernels."""

LIBRARY_TARGETS = frozenset(
  {
    "Sharding",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "MoveToHost",
    "MoveToDevice",
    "annotate_device_placement",
    "LayoutConstraint",
    "X64Combine",
    "X64SplitLow",
    "X64SplitHigh",
  }
)
"""Exact custom-call targets that are markers of JAX/XLA, not user calls."""

# Ops that carry metadata but are bookkeeping, never selected.
_BOOKKEEPING = frozenset(
  {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
)
# Component wrappers that are function names, not transformations of a scope.
_FUNCTION_WRAPPERS = frozenset({"jit", "pjit"})
_WRAPPER_START = re.compile(r"([A-Za-z_]\w*)\(")
# This package's wrappers (the example resource's calls, entangle itself,
# Resource): plumbing between the user's line and the custom call, skipped
# when naming where an op comes from.
_WRAPPER_FILES = frozenset(
  os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
  for name in (
    "_example_resource.py",
    "_entangle.py",
    "_primitive.py",
    "_resource.py",
  )
)


# Selection rules --------------------------------------------------------------


def is_effectful(instruction: _hlo_parse.Instruction) -> bool:
  """Whether a named-scope selector picks `instruction` (by default).

  Effectful work is every custom call except entangle's own no-op (user FFI
  calls, library kernels, host callbacks) and every instruction whose opcode
  is in `EFFECTFUL_OPCODES`. Arithmetic, copies, fusions, bitcasts and
  control flow are not: XLA copies ``op_name`` metadata onto ops it derives
  from a call's result, and those have no observable order.
  """
  if instruction.opcode == "custom-call":
    return instruction.target != _native_loader.ENTANGLE_TARGET
  return instruction.opcode in EFFECTFUL_OPCODES


def is_library_target(target: str) -> bool:
  """Whether `target` is one of JAX's or XLA's own custom-call targets."""
  return target in LIBRARY_TARGETS or target.startswith(LIBRARY_TARGET_PREFIXES)


def is_user_native_call(instruction: _hlo_parse.Instruction) -> bool:
  """Whether ``races`` looks at `instruction` when given no selectors.

  These are custom calls to targets other than entangle's own and other
  than JAX's and XLA's library targets (`is_library_target`): the FFI calls
  your code registered, side-effecting or not.
  """
  return (
    instruction.opcode == "custom-call"
    and instruction.target is not None
    and instruction.target != _native_loader.ENTANGLE_TARGET
    and not is_library_target(instruction.target)
  )


def scope_matches(selector: str, op_name: str) -> bool:
  """Whether `selector` names a ``jax.named_scope`` in `op_name`.

  The selector must equal one or more whole ``/``-separated components
  (so scopes may contain ``/`` and parentheses), either as written or with
  transformation wrappers such as ``vmap(...)``, ``jvp(...)`` and
  ``transpose(...)`` removed. ``jit(name)`` components name functions, not
  scopes, and are never matched.
  """
  needle = f"/{selector}/"
  for variant in _merged_variants(op_name):
    for text in {variant, _unwrap_transforms(variant)}:
      if needle in _strip_function_components(text):
        return True
  return False


def _merged_variants(op_name: str, limit: int = 64) -> list[str]:
  """The op names XLA merged into one, e.g. ``f/(a/x:b/y)`` -> f/a/x, f/b/y.

  When XLA merges equal ops (CSE), it keeps the common prefix of their
  ``op_name`` and joins the rest as ``(first:second)``.
  """
  variants = [op_name]
  done = []
  while variants and len(done) + len(variants) <= limit:
    name = variants.pop()
    components = _split_components(name)
    for n, component in enumerate(components):
      if component.startswith("(") and component.endswith(")"):
        alternatives = _split_top_level(component[1:-1], ":")
        if len(alternatives) > 1:
          for alternative in alternatives:
            rest = components[n + 1 :]
            variants.append("/".join([*components[:n], alternative, *rest]))
          break
    else:
      done.append(name)
  return done + variants


def _split_top_level(text: str, separator: str) -> list[str]:
  """Splits `text` on `separator` outside parentheses."""
  parts, depth, start = [], 0, 0
  for i, c in enumerate(text):
    depth += (c == "(") - (c == ")")
    if c == separator and depth <= 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return parts


def _strip_function_components(op_name: str) -> str:
  """``/op_name/`` with ``jit(...)``-style components blanked out."""
  parts = []
  for component in _split_components(op_name):
    head = _WRAPPER_START.match(component)
    is_function = (
      head is not None
      and head.group(1) in _FUNCTION_WRAPPERS
      and component.endswith(")")
    )
    parts.append("\0" if is_function else component)
  return "/" + "/".join(parts) + "/"


def _split_components(op_name: str) -> list[str]:
  return _split_top_level(op_name, "/")


def _unwrap_transforms(op_name: str) -> str:
  """Replaces ``vmap(x)``-style components by ``x``, recursively."""
  out = []
  for component in _split_components(op_name):
    head = _WRAPPER_START.match(component)
    while (
      head is not None
      and head.group(1) not in _FUNCTION_WRAPPERS
      and component.endswith(")")
      and _balanced(component[head.end() : -1])
    ):
      component = _unwrap_transforms(component[head.end() : -1])
      head = _WRAPPER_START.match(component)
    out.append(component)
  return "/".join(out)


def _balanced(text: str) -> bool:
  depth = 0
  for c in text:
    depth += (c == "(") - (c == ")")
    if depth < 0:
      return False
  return depth == 0


# Ops and labels ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Op:
  """One piece of work: an instruction, or an async ``start``..``done`` pair.

  ``name`` is the instruction that starts it (the custom call itself, or
  the ``*-start``); ``last`` is the one that ends it (the same, or the
  ``*-done``).
  """

  computation: str
  name: str
  last: str
  instruction: _hlo_parse.Instruction = dataclasses.field(compare=False)

  @property
  def target(self) -> str | None:
    """The custom call's target name, or None when the op is no custom call."""
    return self.instruction.target

  @property
  def scope(self) -> str:
    """The ``op_name`` metadata: jitted function, named scopes, primitive."""
    return self.instruction.op_name

  @property
  def location(self) -> str | None:
    """``file:line`` of the Python code that made the op, if recorded.

    The innermost frame, skipping this package's wrappers (so a call made
    through ``entangle_jax.testing.write_slot``, or an ``entangle``, points
    at the line that called it); paths under the working directory are shown
    relative to it.
    """
    stack = self.instruction.stack
    if not stack:
      return None
    outside = [f for f in stack if not _is_wrapper(f[0])]
    file, line = (outside or list(stack))[0]
    return f"{_short_path(file)}:{line}"

  def label(self) -> str:
    """One line naming the op as the user wrote it."""
    what = self.target or self.instruction.opcode
    parts = [what]
    if self.scope:
      parts.append(f"scope {self.scope!r}")
    if self.location:
      parts.append(f"at {self.location}")
    parts.append(f"(%{self.name})")
    return " ".join(parts)


def _is_wrapper(path: str) -> bool:
  return os.path.abspath(path) in _WRAPPER_FILES


def _short_path(path: str) -> str:
  absolute = os.path.abspath(path)
  cwd = os.getcwd()
  if absolute.startswith(cwd + os.sep):
    return os.path.relpath(absolute, cwd)
  return path


class Race(tuple[str, str]):
  """An unordered pair of ops.

  Compares equal to the ``(first, second)`` tuple of their instruction
  names; ``first`` and ``second`` are the `Op` objects, which
  `format_races` renders.
  """

  first: Op
  second: Op

  def __new__(cls, first: Op, second: Op) -> Race:
    race = super().__new__(cls, (first.name, second.name))
    race.first = first
    race.second = second
    return race


# The analysis -----------------------------------------------------------------


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

  def __init__(
    self,
    compiled: jax.stages.Compiled | jax.stages.Lowered | str,
    *,
    all_ops: bool = False,
  ):
    self._module = _hlo_parse.parse(module_text(compiled))
    self._all_ops = all_ops
    self._by_name = {
      (i.computation, i.name): i
      for instructions in self._module.computations.values()
      for i in instructions
    }
    self._spans = self._find_spans()
    self._callers = self._find_callers()
    self._site_paths_cache: dict[str, list] = {}
    self._closures: dict[str, tuple] = {}
    self._loops: dict[tuple[str, str], tuple] = {}

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
    _check_selector(selector)
    found = [
      self.op(i) for i in self._instructions() if self._picks(selector, i)
    ]
    if not found:
      raise ValueError(
        f"selector {selector!r} matches no op of the compiled module. "
        f"Custom-call targets: {self._targets()}. Scopes of selectable ops "
        f"(op_name): {self._scopes()}."
      )
    return list(dict.fromkeys(found))

  def effectful_ops(self) -> list[Op]:
    """Every op `is_effectful` accepts, once each, in module text order."""
    ops = (self.op(i) for i in self._instructions() if is_effectful(i))
    return list(dict.fromkeys(ops))

  def user_native_calls(self) -> list[Op]:
    """The ops ``races`` looks at by default (`is_user_native_call`)."""
    ops = (self.op(i) for i in self._instructions() if is_user_native_call(i))
    return list(dict.fromkeys(ops))

  def empty_witness_entangles(self) -> list[Op]:
    """Entangle calls whose witnesses are all zero-size: they order nothing.

    A zero-size array holds no bytes. XLA replaces a zero-size value that no
    side effect produces by an empty constant, so the witness's producer is
    no longer an operand at all; and an empty buffer conflicts with nothing,
    so no runtime orders on it.
    """
    found = []
    for i in self._instructions():
      if i.target != _native_loader.ENTANGLE_TARGET:
        continue
      witnesses = self._witnesses(i)
      if witnesses and all(w.zero_sized for w in witnesses):
        found.append(self.op(i))
    return found

  def _witnesses(
    self, entangle: _hlo_parse.Instruction
  ) -> list[_hlo_parse.Instruction]:
    """An entangle call's witness operands: those no result aliases."""
    return [
      self._by_name[(entangle.computation, name)]
      for n, name in enumerate(entangle.operands)
      if n not in entangle.aliased_operands
    ]

  def op(self, instruction: _hlo_parse.Instruction) -> Op:
    """The `Op` that `instruction` is part of (an async pair, or itself)."""
    first, last = self._spans.get(
      (instruction.computation, instruction.name),
      (instruction.name, instruction.name),
    )
    return Op(
      instruction.computation,
      first,
      last,
      self._by_name[(instruction.computation, first)],
    )

  def _picks(self, selector: str, i: _hlo_parse.Instruction) -> bool:
    if i.opcode == "custom-call" and i.target == selector:
      return True
    if i.opcode in _BOOKKEEPING or not i.op_name:
      return False
    if not (self._all_ops or is_effectful(i)):
      return False
    return scope_matches(selector, i.op_name)

  def _targets(self) -> list[str]:
    return sorted({i.target for i in self._instructions() if i.target})

  def _scopes(self) -> list[str]:
    return sorted(
      {
        i.op_name
        for i in self._instructions()
        if i.op_name
        and i.opcode not in _BOOKKEEPING
        and (self._all_ops or is_effectful(i))
      }
    )

  def _instructions(self) -> Iterable[_hlo_parse.Instruction]:
    return self._by_name.values()

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
    if isinstance(among, str):
      raise TypeError(
        f"`among` must be a list of selectors, not the string {among!r}; "
        f"write among=[{among!r}]"
      )
    if not isinstance(among, Iterable):
      raise TypeError(f"`among` must be a list of selectors, not {among!r}")
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
    paths_a, paths_b = self._call_paths(a), self._call_paths(b)
    if not paths_a or not paths_b:
      return False  # Too many call sites to conclude anything.
    return all(self._path_precedes(pa, pb) for pa in paths_a for pb in paths_b)

  def _path_precedes(self, pa, pb) -> bool:
    for x, y in zip(pa, pb, strict=False):
      if x.computation != y.computation:
        return False  # Different computations of one caller.
      if x.name != y.name:
        return self._reaches(x.computation, x.last, y.name)
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
    paths_a, paths_b = self._call_paths(a), self._call_paths(b)
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

  def _find_spans(self) -> dict[tuple[str, str], tuple[str, str]]:
    """Each instruction of an async pair -> (its start, its done)."""
    spans = {}
    for computation, instructions in self._module.computations.items():
      users = _users(instructions)
      for i in instructions:
        if not _starts_async(i.opcode):
          continue
        chain = [i.name]
        current = i
        while not _ends_async(current.opcode):
          step = [u for u in users.get(current.name, []) if _continues(u)]
          if not step:
            break
          current = step[0]
          chain.append(current.name)
        for name in chain:
          spans[(computation, name)] = (chain[0], chain[-1])
    return spans

  def _find_callers(self) -> dict[str, list[Op]]:
    callers: dict[str, list[Op]] = {}
    for instruction in self._instructions():
      for callee in instruction.callees:
        sites = callers.setdefault(callee, [])
        site = self.op(instruction)
        if site not in sites:
          sites.append(site)
    return callers

  def _call_paths(self, op: Op) -> list[tuple[Op, ...]]:
    """Chains of call sites from the entry computation down to `op`."""
    return [(*path, op) for path in self._site_paths(op.computation)]

  def _site_paths(self, computation: str):
    if computation not in self._site_paths_cache:
      self._site_paths_cache[computation] = self._find_site_paths(computation)
    return self._site_paths_cache[computation]

  def _find_site_paths(self, computation: str):
    if computation == self._module.entry:
      return [()]
    paths = []
    for site in self._callers.get(computation, []):
      paths.extend((*path, site) for path in self._site_paths(site.computation))
      if len(paths) > _PATH_LIMIT:
        return []
    return paths

  def _reaches(self, computation: str, source: str, target: str) -> bool:
    index, closure = self._closure(computation)
    return bool(closure[index[source]] >> index[target] & 1)

  def _closure(self, computation: str):
    if computation not in self._closures:
      self._closures[computation] = self._find_closure(computation)
    return self._closures[computation]

  def _find_closure(self, computation: str):
    """Per instruction, the bitset of instructions that depend on it."""
    instructions = self._module.computations[computation]
    index = {i.name: n for n, i in enumerate(instructions)}
    users: list[list[int]] = [[] for _ in instructions]
    for n, i in enumerate(instructions):
      for producer in self._producers(i):
        users[index[producer]].append(n)
    reach = [0] * len(instructions)
    for n in reversed(_topological_order(users)):
      bits = 0
      for user in users[n]:
        bits |= (1 << user) | reach[user]
      reach[n] = bits
    return index, reach

  def _producers(self, i: _hlo_parse.Instruction) -> Iterable[str]:
    """Operands whose values `i` reads: the edges the runtime honours."""
    for name in i.operands:
      operand = self._by_name[(i.computation, name)]
      if i.opcode == "while" and operand.opcode == "tuple":
        # The loop reads only the elements its body or condition use; an
        # element it merely carries through is no buffer conflict of it.
        used = self._loop_elements(i)[0]
        elements = [
          self._by_name[(i.computation, e)]
          for k, e in enumerate(operand.operands)
          if used is None or k in used
        ]
        yield from (e.name for e in elements if not e.zero_sized)
        continue
      if i.opcode == "while" and self._loop_elements(i)[0] == set():
        continue  # The loop reads nothing of its init: no conflict.
      if i.opcode == "get-tuple-element" and i.tuple_index is not None:
        operand = self._element(operand, i.tuple_index)
      if not operand.zero_sized:
        yield operand.name

  def _element(
    self, producer: _hlo_parse.Instruction, index: int
  ) -> _hlo_parse.Instruction:
    """The instruction that produced element `index` of `producer`."""
    if producer.opcode == "tuple" and index < len(producer.operands):
      return self._by_name[(producer.computation, producer.operands[index])]
    if producer.opcode == "while" and index in self._loop_elements(producer)[1]:
      # Carried through unchanged: the value (and buffer) of the init.
      (init,) = producer.operands[:1] or (None,)
      if init is not None:
        return self._element(self._by_name[(producer.computation, init)], index)
    return producer

  def _loop_elements(self, loop: _hlo_parse.Instruction):
    """(elements the loop reads or None for all, elements it carries through).

    XLA:CPU runs a while loop as one thunk whose buffer uses are those of
    the thunks in its condition and body, so only the elements some op in
    there reads make the loop wait for their producers.
    """
    key = (loop.computation, loop.name)
    if key not in self._loops:
      self._loops[key] = self._find_loop_elements(loop)
    return self._loops[key]

  def _find_loop_elements(self, loop: _hlo_parse.Instruction):
    used: set[int] | None = set()
    carried: set[int] = set()
    for callee in loop.callees:
      instructions = self._module.computations.get(callee, [])
      params = [i for i in instructions if i.opcode == "parameter"]
      if len(params) != 1:
        return None, set()
      users = _users(instructions)
      for user in users.get(params[0].name, []):
        if user.opcode == "get-tuple-element" and user.tuple_index is not None:
          if used is not None and _read_by_an_op(user, users):
            used.add(user.tuple_index)
        elif not user.root:
          used = None
      if callee == loop.body:
        root = next((i for i in instructions if i.root), None)
        if root is not None and root.opcode == "tuple":
          for k, name in enumerate(root.operands):
            element = self._by_name[(callee, name)]
            if (
              element.opcode == "get-tuple-element"
              and element.tuple_index == k
              and element.operands == (params[0].name,)
            ):
              carried.add(k)
    return used, carried


def _users(instructions) -> dict[str, list[_hlo_parse.Instruction]]:
  users: dict[str, list[_hlo_parse.Instruction]] = {}
  for i in instructions:
    for operand in i.operands:
      users.setdefault(operand, []).append(i)
  return users


# Ops that only rename or regroup buffers: no thunk reads through them.
_FORWARDING = frozenset({"get-tuple-element", "bitcast", "tuple"})


def _read_by_an_op(value: _hlo_parse.Instruction, users) -> bool:
  """Whether an op other than the ROOT forwarding reads `value`."""
  pending, seen = [value], set()
  while pending:
    current = pending.pop()
    for user in users.get(current.name, []):
      if user.name in seen:
        continue
      seen.add(user.name)
      if user.root and user.opcode == "tuple":
        continue  # Carried to the next iteration, not read.
      if user.opcode not in _FORWARDING:
        return True
      pending.append(user)
  return False


def _starts_async(opcode: str) -> bool:
  return opcode.endswith("-start") or opcode in ("send", "recv")


def _ends_async(opcode: str) -> bool:
  return opcode.endswith("-done")


def _continues(user: _hlo_parse.Instruction) -> bool:
  return user.opcode == "async-update" or _ends_async(user.opcode)


def _check_selector(selector: object) -> None:
  if not isinstance(selector, str):
    raise TypeError(
      f"a selector must be a str (a custom-call target or a named scope), "
      f"not {type(selector).__name__}: {selector!r}"
    )
  if not selector:
    raise ValueError("a selector must not be empty")


def module_text(
  compiled: jax.stages.Compiled | jax.stages.Lowered | str,
) -> str:
  """The optimized HLO text of `compiled` (or `compiled` itself, if text).

  A ``jax.stages.Lowered`` is compiled first.

  Raises:
    TypeError: `compiled` is none of those (for example a jitted function).
  """
  if isinstance(compiled, str):
    return compiled
  if isinstance(compiled, jax.stages.Lowered):
    compiled = compiled.compile()
  if not isinstance(compiled, jax.stages.Compiled):
    raise TypeError(
      "expected a jax.stages.Compiled (jax.jit(f).lower(*args).compile()), "
      f"a jax.stages.Lowered or HLO text, got {type(compiled).__name__}"
    )
  text = compiled.as_text()
  if text is None:
    raise ValueError(f"{compiled!r} has no HLO text to analyse")
  return text


def _topological_order(users: list[list[int]]) -> list[int]:
  indegree = [0] * len(users)
  for targets in users:
    for t in targets:
      indegree[t] += 1
  ready = [n for n, d in enumerate(indegree) if d == 0]
  order = []
  while ready:
    n = ready.pop()
    order.append(n)
    for t in users[n]:
      indegree[t] -= 1
      if indegree[t] == 0:
        ready.append(t)
  return order


# Module-level API -------------------------------------------------------------

FIX_HINT = (
  "Usual fix: make the later call consume a value computed from the earlier "
  "call's result, e.g. `token = entangle(token, x)` with the read's result "
  "`x` before the write."
)


def format_races(races: Sequence[Race], heading: str | None = None) -> str:
  """Renders unordered pairs, one line each, plus the usual fix.

  Args:
    races: pairs from `races` or `OrderAnalysis.unordered`.
    heading: first line; by default it counts the pairs.
  """
  count = len(races)
  if not count and heading is None:
    return "Every pair of ops is ordered."
  lines = [heading or f"{count} pair{'s' * (count != 1)} of ops not ordered:"]
  for race in races:
    lines.append(f"  {race.first.label()}")
    lines.append(f"    is not ordered before {race.second.label()}")
  lines.append(FIX_HINT)
  return "\n".join(lines)


def happens_before(
  compiled: jax.stages.Compiled | jax.stages.Lowered | str,
  before: Selector,
  after: Selector,
  *,
  all_ops: bool = False,
) -> bool:
  """Whether every op `before` selects precedes every op `after` selects.

  Precedence means a chain of the edges the XLA runtime honours (operands,
  not control predecessors; async pairs from their start to their done) in
  the compiled, optimized module, following nested computations through the
  instructions that call them. See the module docstring of
  ``entangle_jax._hlo_order`` for exactly what is concluded.

  Args:
    compiled: a ``jax.stages.Compiled`` (``jax.jit(f).lower(*a).compile()``),
      a ``jax.stages.Lowered`` or the HLO text.
    before, after: selectors. A selector picks custom calls whose target
      equals it, and the effectful work (custom calls other than entangle's,
      communication, I/O) in the ``jax.named_scope`` of that name.
    all_ops: let scope selectors pick every op in the scope instead.

  Raises:
    ValueError: a selector is empty or matches nothing; the message lists
      what exists.
  """
  return OrderAnalysis(compiled, all_ops=all_ops).happens_before(before, after)


def assert_happens_before(
  compiled: jax.stages.Compiled | jax.stages.Lowered | str,
  before: Selector,
  after: Selector,
  *,
  all_ops: bool = False,
) -> None:
  """Asserts `happens_before`, explaining every unordered pair on failure.

  Raises:
    AssertionError: some op `before` selects does not precede some op
      `after` selects; the message names each pair by custom-call target,
      named scope and Python ``file:line``, and says the usual fix. If an
      ``entangle`` call in the module has only zero-size witnesses, which
      order nothing (`OrderAnalysis.empty_witness_entangles`), the message
      names it too.
  """
  analysis = OrderAnalysis(compiled, all_ops=all_ops)
  unordered = analysis.unordered(before, after)
  if unordered:
    count = len(unordered)
    message = format_races(
      unordered,
      heading=f"{before!r} does not happen before {after!r}: {count} "
      f"pair{'s' * (count != 1)} not ordered",
    )
    empty = analysis.empty_witness_entangles()
    if empty:
      message += "\n" + _empty_witness_note(empty)
    raise AssertionError(message)


def _empty_witness_note(entangles: Sequence[Op]) -> str:
  count = len(entangles)
  lines = [
    f"Note: {count} entangle call{'s' * (count != 1)} here only "
    f"{'have' if count != 1 else 'has'} zero-size witnesses, which order "
    "nothing (an array with no elements holds no bytes to depend on; XLA "
    "replaces it by an empty constant). Pass a witness with at least one "
    "element, such as the read's result itself:"
  ]
  lines += [f"  {op.label()}" for op in entangles]
  return "\n".join(lines)


def races(
  compiled: jax.stages.Compiled | jax.stages.Lowered | str,
  among: Sequence[Selector] | None = None,
  *,
  all_ops: bool = False,
) -> list[Race]:
  """Pairs of ops that no honoured dependency chain orders, either way.

  Ops in different branches of one ``conditional`` never both run in one
  execution of it: such pairs are exclusive (`OrderAnalysis.exclusive`) and
  not reported.

  Args:
    compiled: a ``jax.stages.Compiled``, ``jax.stages.Lowered`` or HLO text.
    among: selectors choosing the ops to consider. By default: every custom
      call to a target other than entangle's own and JAX's/XLA's library
      targets (LAPACK, cuBLAS, cuSOLVER, host callbacks...; see
      `is_user_native_call`).
    all_ops: let scope selectors pick every op in the scope.

  Returns:
    `Race` pairs, ops in module text order by default, else in the order of
    the selectors in `among`. Each equals the ``(first, second)`` tuple of
    instruction names; `format_races` renders them with targets, scopes and
    source lines.

  Raises:
    TypeError: `among` is a string rather than a sequence of selectors.
    ValueError: a selector is empty or matches nothing.
  """
  return OrderAnalysis(compiled, all_ops=all_ops).races(among)
