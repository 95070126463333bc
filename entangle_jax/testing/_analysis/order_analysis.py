"""`OrderAnalysis`: questions about the order and conflicts of one module.

Which edges count is `entangle_jax.testing._order.edges`'s docstring; how
ops in different computations relate, `entangle_jax.testing._order.reach`'s;
which ops a selector picks, `entangle_jax.testing._analysis.selectors`'s; what
conflicts, `entangle_jax.testing._order.access`'s.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence

from entangle_jax._src import access_policy
from entangle_jax._src.access_policy import Footprint
from entangle_jax._src.conflict_rule import APART_REASON, Verdict
from entangle_jax._src.targets import platforms, sources
from entangle_jax._src.targets.declaration import (
  Declarations,
  SafePair,
)
from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing import _hlo
from entangle_jax.testing._analysis import device_processes, xla_changes
from entangle_jax.testing._analysis import gc as _gc
from entangle_jax.testing._analysis import selectors as _selectors
from entangle_jax.testing._analysis.device_processes import ProcessMap
from entangle_jax.testing._analysis.ops import Op, Race, program_order_of
from entangle_jax.testing._analysis.selectors import Selector
from entangle_jax.testing._hlo import entry_shardings, host_callbacks
from entangle_jax.testing._hlo.module_text import (
  CompiledModule,
  lowered_hlo_text,
  module_text,
)
from entangle_jax.testing._order import access, call_graph, may_order
from entangle_jax.testing._order.dataflow import Dataflow
from entangle_jax.testing._order.identity import ObjectFinder
from entangle_jax.testing._order.objects import ObjectRef
from entangle_jax.testing._order.relations import OpOrder

CallPath = tuple[Op, ...]
"""Call sites from the entry computation down to an op, then the op."""


@dataclasses.dataclass(frozen=True)
class LeftOut:
  """A pair that would race, left out because a declared safe pair
  covers its targets: the declaration is taken at its word."""

  race: Race
  pair: SafePair
  """The ``safe_pairs`` entry that covers it."""


class Races(list):
  """What ``races`` returns: a list of `Race`, and `left_out`, the pairs
  that declared safe pairs left out of it (so that `format_races` never
  calls a module free of races when a declaration excused some)."""

  left_out: tuple[LeftOut, ...] = ()
  declared: tuple[str, ...] = ()
  """The declarations applied to the calls asked about, as reports write
  them: what decided the answer, even where it is no race."""
  unseen: str | None = None
  """Why the answer holds for the optimized module only, when the module
  before optimization was not at hand (a ``Compiled``, or text): the races
  that XLA's optimizer hid (`Race.xla_change`) cannot be seen then. None
  when the program's own order was compared too."""


class ParsedModule:
  """What follows from one module's text alone, shared by every
  `OrderAnalysis` of that text: the parse, the computations' edges, the
  live instructions, and the order among the ops asked about so far.

  Everything here is a function of the text (and of the sites asked
  about), so sharing it cannot change an answer: what ops access, and
  which ops a selector picks, are each analysis' own.
  """

  def __init__(self, text: str, optimized: bool = True):
    self.module = _hlo.parse(text, optimized=optimized)
    self.optimized = optimized
    self.dataflow = Dataflow(self.module)
    self._order: OpOrder | None = None
    self._live: list[_hlo.Instruction] | None = None
    self._native_calls: list[_hlo.Instruction] | None = None
    self._finders: dict[Declarations, ObjectFinder] = {}

  def objects(self, declarations: Declarations) -> ObjectFinder:
    """The `ObjectFinder` of the module under `declarations`."""
    if declarations not in self._finders:
      self._finders[declarations] = ObjectFinder(
        self.module, self.dataflow, declarations
      )
    return self._finders[declarations]

  def live(self) -> list[_hlo.Instruction]:
    """The instructions of the computations the entry runs, in text order
    (dead code never runs: rule 5)."""
    if self._live is None:
      live = call_graph.reachable(self.module)
      computations = self.module.computations.items()
      self._live = [
        i for name, body in computations if name in live for i in body
      ]
    return self._live

  def native_calls(self) -> list[_hlo.Instruction]:
    """Those of `live` that `is_user_native_call` accepts."""
    if self._native_calls is None:
      self._native_calls = [
        i for i in self.live() if _selectors.is_user_native_call(i)
      ]
    return self._native_calls

  def order_among(self, sites: Sequence[call_graph.Site]) -> OpOrder:
    """An `OpOrder` that relates every one of `sites` (and the native
    calls, which ``races`` and ``order_graph`` ask about by default)."""
    order = self._order
    if order is None or not order.covers(sites):
      known = order.sites if order else self._native_call_sites()
      order = OpOrder(self.dataflow, list(dict.fromkeys([*known, *sites])))
      self._order = order
    return order

  def _native_call_sites(self) -> list[call_graph.Site]:
    sites = []
    for i in self.native_calls():
      graph = self.dataflow[i.computation]
      start, _ = graph.span[graph.index[i.name]]
      sites.append((i.computation, start))
    return sites


@functools.lru_cache(maxsize=2)
@_gc.without_gc
def _parsed(text: str, optimized: bool = True) -> ParsedModule:
  """The `ParsedModule` of the two texts analysed last: ``races(c)`` then
  ``order_graph(c)`` parse once and relate the module's native calls once.
  Keyed by the text (and whether it is the optimized module), which is all
  it depends on."""
  return ParsedModule(text, optimized)


class OrderAnalysis:
  """Ordering facts about one compiled module.

  Build it once and ask many questions; the module-level functions build
  one per call. Parsing is linear in the module; the first question about
  order builds happens-before among the native calls and the ops it asks
  about (`entangle_jax.testing._order.reach`).

  Args:
    compiled: a ``jax.stages.Compiled``, a ``jax.stages.Lowered`` (compiled
      here) or the optimized, scheduled HLO text.
    all_ops: let named-scope selectors pick every op in the scope
      (arithmetic, fusions, copies...), not only effectful work
      (`is_effectful`). Target selectors are unaffected.
    read_targets: the custom-call targets whose calls only read, in place
      of the modes the declarations give (any other target declared
      ``"read"`` then may write).
    declarations: what the targets do and which objects they touch
      (`entangle_jax.testing.Declarations`); by default those in effect
      when the analysis is made: the nearest ``pyproject.toml``'s
      ``[tool.entangle-jax]`` table, `declare_target` calls, and the
      declarations installed bindings publish. Later declarations do not
      change this analysis.
    before_optimization: the text of the module before optimization
      (a dump's ``*before_optimizations.txt``, or
      ``Lowered.as_text(dialect="hlo", debug_info=True)``), where
      `compiled` is text or a ``Compiled``; a ``Lowered`` gives its own.
      With it, ``races`` also reports the pairs that the program leaves
      unordered and that XLA's optimizer hid (`Race.xla_change`); without
      it, its answer says that it could not see them (`Races.unseen`).
    processes: which process runs each of the module's devices
      (`device_processes.ProcessMap`); by default a ``Compiled``'s own
      (its devices' ``process_index``), none for text or a ``Lowered``.
      Where each device is in a process of its own, the pairs across
      devices (`Race.across_devices`) share no process-wide state, and
      ``races`` leaves them out (in ``left_out``, with that reason).

  Every answer is a function of the module's text, `all_ops`,
  `read_targets`, `declarations` and the map of processes.

  Raises:
    TypeError: `compiled` is none of those, `read_targets` is a string
      or holds something other than strings, or `processes` is no
      ``ProcessMap``.
    ValueError: the text is not an optimized, scheduled module, a line
      of it cannot be read (the message names it), or `processes` does
      not fit the module's devices (the message names its source).

  The methods that take `Op` objects raise ``TypeError`` for anything else
  and ``ValueError`` for an `Op` of another module.
  """

  def __init__(
    self,
    compiled: CompiledModule,
    *,
    all_ops: bool = False,
    read_targets: Iterable[str] | None = None,
    declarations: Declarations | None = None,
    before_optimization: str | None = None,
    processes: ProcessMap | None = None,
    who: str = "OrderAnalysis",
    _optimized: bool = True,
  ):
    self._read_targets = _read_targets(read_targets)
    if processes is not None and not isinstance(processes, ProcessMap):
      raise TypeError(
        "processes must be a ProcessMap (which process runs each device), "
        f"not {type(processes).__name__}"
      )
    if before_optimization is not None and not isinstance(
      before_optimization, str
    ):
      raise TypeError(
        "before_optimization must be the HLO text of the module before "
        f"optimization (a str), not {type(before_optimization).__name__}"
      )
    if declarations is None:
      declarations = sources.current()
    elif not isinstance(declarations, Declarations):
      raise TypeError(
        "declarations must be an entangle_jax.testing.Declarations, not "
        f"{type(declarations).__name__}"
      )
    self.declarations = declarations
    """The declarations this analysis applies."""
    self._finder: ObjectFinder | None = None
    if _optimized:
      text = _with_entry_shardings(compiled, who)
    else:
      text = compiled if isinstance(compiled, str) else ""
    self._shared = _parsed(text, _optimized)
    # Where XLA keeps optimization_barrier in what runs (TPU, where
    # entangle lowers to one), a barrier orders its results after all its
    # operands in the program too.
    self._barriers_order = platforms.of_text(text) is platforms.TPU
    self.module, self._dataflow = self._shared.module, self._shared.dataflow
    self._before_optimization = before_optimization
    # A Lowered prints its module before optimization when first asked.
    self._lowered = (
      compiled if _optimized and before_optimization is None else None
    )
    self._program: OrderAnalysis | None = None
    self._apart = self._devices_apart(
      processes, compiled if _optimized else None
    )
    self._all_ops = all_ops
    self._ops: dict[tuple[str, str], Op] = {}
    self._native_calls: list[Op] | None = None
    self._chains: dict[str, list[call_graph.Chain]] | None = None

  def _devices_apart(
    self, processes: ProcessMap | None, compiled: object
  ) -> ProcessMap | None:
    """The map under which each of the module's devices is in a process
    of its own (`device_processes.apart`), so that the device rule finds
    no race on process-wide state; None when some process holds two of
    them, or no map is at hand (given, or a ``Compiled``'s).

    Raises:
      ValueError: a given map that does not fit the module's devices.
    """
    devices = self.module.devices
    if devices < 2:
      return None
    if processes is not None:
      given = processes.for_devices(devices)
      return processes if device_processes.apart(given) else None
    found = device_processes.of_compiled(compiled)
    if found is None or found.indices is None or len(found.indices) != devices:
      return None  # Not this module's devices: claim nothing.
    return found if device_processes.apart(found.indices) else None

  # Ops ----------------------------------------------------------------------

  def op(self, instruction: _hlo.Instruction) -> Op:
    """The `Op` that `instruction` is part of (an async pair, or itself)."""
    key = (instruction.computation, instruction.name)
    if key not in self._ops:
      # The structure, not the edges: the program's ops are compared by
      # what they access, and their order is asked of the may-order.
      graph = self._dataflow.computation(instruction.computation)
      start, done = graph.spans()[graph.index[instruction.name]]
      first = graph.instructions[start]
      found = self._footprint(first)
      self._ops[key] = Op(
        first.computation,
        first.name,
        graph.instructions[done].name,
        first,
        access.accesses_of(found),
        found,
        operand_elements=_operand_elements(graph, first),
      )
    return self._ops[key]

  def _footprint(self, i: _hlo.Instruction) -> Footprint[ObjectRef]:
    """What the one access policy says `i` touches, its object operand
    followed back through the module (`ObjectFinder`) when the policy
    names one."""
    operands: Sequence[ObjectRef | None] = ()
    if i.opcode == "custom-call":
      if self._finder is None:
        self._finder = self._shared.objects(self.declarations)
      # Raises for a declared object operand the call lacks, naming it.
      self._finder.object_operand(i)
      operands = _ObjectOperands(self._finder, i)
    return access_policy.footprint(
      i.target,
      self.declarations,
      operands=operands,
      op_name=i.op_name,
      read_targets=self._read_targets,
    )

  def _unique(self, instructions: Iterable[_hlo.Instruction]) -> list[Op]:
    return list(dict.fromkeys(self.op(i) for i in instructions))

  @_gc.without_gc
  def effectful_ops(self) -> list[Op]:
    """Every op `is_effectful` accepts, once each, in module text order."""
    return self._unique(
      i for i in self._shared.live() if _selectors.is_effectful(i)
    )

  @_gc.without_gc
  def user_native_calls(self) -> list[Op]:
    """The ops ``races`` looks at by default (`is_user_native_call`)."""
    if self._native_calls is None:
      self._native_calls = self._unique(self._shared.native_calls())
    return list(self._native_calls)

  def empty_witness_entangles(self) -> list[Op]:
    """Entangle calls whose witnesses are all zero-size: they order nothing.

    A zero-size array holds no bytes. XLA replaces a zero-size value that no
    side effect produces by an empty constant, so the witness's producer is
    no longer an operand at all; and an empty buffer conflicts with nothing,
    so no runtime orders on it.
    """
    return [self.op(i) for i in _empty_witness_entangles(self.module)]

  def call_paths(self, op: Op) -> list[CallPath]:
    """Chains of call sites from the entry computation down to `op` (none
    when there are more than 64)."""
    if self._chains is None:
      self._chains = call_graph.call_chains(self.module)
    paths = []
    for chain in self._chains.get(op.computation, []):
      sites = tuple(self.op(self.module.computations[c][p]) for c, p in chain)
      paths.append((*sites, op))
    return paths

  # Selection ----------------------------------------------------------------

  def select(self, selector: Selector) -> list[str]:
    """Names of the ops `selector` picks, in module text order."""
    return [op.name for op in self.select_ops(selector)]

  @_gc.without_gc
  def select_ops(self, selector: Selector) -> list[Op]:
    """The `Op` objects `selector` picks
    (`entangle_jax.testing._analysis.selectors`).

    Raises:
      TypeError: `selector` is not a string.
      ValueError: `selector` is empty, or picks nothing; the message lists
        the targets and scopes that exist.
    """
    _selectors.check_selector(selector)
    instructions = self._shared.live()
    found = self._unique(
      i for i in instructions if _selectors.picks(selector, i, self._all_ops)
    )
    if not found:
      raise ValueError(
        _selectors.no_match_message(selector, instructions, self._all_ops)
      )
    return found

  def ops_among(self, among: Iterable[Selector] | None = None) -> list[Op]:
    """The ops that ``races(among)`` and ``order_graph`` look at: each op
    once, in selector order (text order within one selector); by default
    `user_native_calls`.

    Raises:
      TypeError: `among` is a string, or not an iterable of selectors.
      ValueError: a selector is empty or picks nothing.
    """
    if among is None:
      return self.user_native_calls()
    _selectors.check_among(among)
    return list(dict.fromkeys(op for s in among for op in self.select_ops(s)))

  # Questions ----------------------------------------------------------------

  def _site(self, op: Op) -> call_graph.Site:
    return (op.computation, self._dataflow[op.computation].index[op.name])

  @_gc.without_gc
  def _order_of(self, ops: Sequence[Op]) -> tuple[OpOrder, list]:
    """The order among `ops`, and their sites in it."""
    _check_ops(self, ops)
    sites = [self._site(op) for op in ops]
    return self._shared.order_among(sites), sites

  def precedes(self, a: Op, b: Op) -> bool:
    """Whether every execution of `a` ends before every execution of `b`
    (at each pair of their call sites) begins."""
    order, (x, y) = self._order_of((a, b))
    return order.precedes(x, y)

  def exclusive(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` lie in different branches of one conditional at
    every pair of their call sites: one execution runs one of them."""
    order, (x, y) = self._order_of((a, b))
    return order.exclusive(x, y)

  def sequenced(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` lie in the condition and the body of one loop at
    every pair of their call sites: the loop runs them in turn."""
    order, (x, y) = self._order_of((a, b))
    return order.sequenced(x, y)

  def conflict(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` may access one object, one of them writing, and
    no declared safe pair covers their targets."""
    return any(v.conflict for v in self.verdicts(a, b))

  def verdicts(
    self, a: Op, b: Op, *, across_devices: bool = False
  ) -> list[Verdict]:
    """The one rule's verdict on each pair of an access of `a` and one of
    `b`, and why (`conflict_rule.Verdict`); on two different devices of
    the module where `across_devices`, where a target declared
    ``"per-device"`` touches each device's own object."""
    _check_ops(self, (a, b))
    safe = (
      access_policy.safe_pair(self.declarations, a.target, b.target) is not None
    )
    return access.verdicts(
      a.accesses,
      b.accesses,
      safe=safe,
      across_devices=across_devices,
      devices=(a.devices, b.devices),
      undeclared=(a.declaration is None, b.declaration is None),
    )

  def is_race(self, a: Op, b: Op) -> bool:
    """Whether `a` and `b` may conflict and nothing keeps them from running
    at the same time (no order, branch or loop between them) on one
    device; `races` also reports the pairs across the devices of an SPMD
    module (`Race.across_devices`)."""
    if not self.conflict(a, b):
      return False
    order, (x, y) = self._order_of((a, b))
    return order.may_overlap(x, y)

  def happens_before(self, before: Selector, after: Selector) -> bool:
    """True iff every op `before` selects precedes every op `after` selects."""
    return not self.unordered(before, after)

  @_gc.without_gc
  def unordered(self, before: Selector, after: Selector) -> list[Race]:
    """Pairs ``(a, b)`` of selected ops where ``a`` does not precede ``b``."""
    firsts, seconds = self.select_ops(before), self.select_ops(after)
    order, sites = self._order_of([*firsts, *seconds])
    pairs = order.unordered(sites[: len(firsts)], sites[len(firsts) :])
    return [Race(firsts[i], seconds[j]) for i, j in pairs]

  @_gc.without_gc
  def races(self, among: Iterable[Selector] | None = None) -> Races:
    """Pairs of ops that may conflict and may run in either order
    (`is_race`), in the order of `ops_among`, each pair's calls in the
    order the program made them (`Race.first` is the earlier); then, in
    a module that runs on several devices, the pairs of calls on targets
    declared shared across devices that may conflict on two devices (the
    device rule), a call with itself included. Pairs that a declared safe
    pair covers are left out, and kept in the answer's ``left_out``
    (`Races`; `safe_pairs_left_out`).

    Raises:
      TypeError: `among` is a string rather than a sequence of selectors.
      ValueError: a selector is empty or matches nothing.
    """
    kept = Races()
    left_out = []
    ops, found = self._all_races(among)
    hidden, kept.unseen = self._hidden_races(among, ops, found)
    for race in [*found, *hidden]:
      if race.across_devices and self._apart is not None:
        left_out.append(LeftOut(race, self._apart_pair(race)))
        continue
      pair = access_policy.safe_pair(
        self.declarations, race.first.target, race.second.target
      )
      if pair is None:
        kept.append(race)
      else:
        left_out.append(LeftOut(race, pair))
    kept.left_out = tuple(left_out)
    applied = dict.fromkeys(op.declaration for op in ops)
    kept.declared = tuple(str(d) for d in applied if d is not None)
    return kept

  def _apart_pair(self, race: Race) -> SafePair:
    """What leaves out `race`, on two devices each in a process of its
    own: its two targets, `APART_REASON`, and the map's source."""
    first, second = (
      op.target or op.instruction.opcode for op in (race.first, race.second)
    )
    return SafePair(first, second, APART_REASON, str(self._apart))

  def program(self) -> OrderAnalysis | None:
    """The analysis of the module before optimization, the program as JAX
    lowered it (with the same declarations), when that module is at hand;
    None otherwise.

    Raises:
      ValueError: that text cannot be read as an HLO module.
    """
    if self._before_optimization is None and self._lowered is not None:
      self._before_optimization = lowered_hlo_text(self._lowered)
      self._lowered = None
    if self._before_optimization is None:
      return None
    if self._program is None:
      self._program = OrderAnalysis(
        self._before_optimization,
        all_ops=self._all_ops,
        read_targets=self._read_targets,
        declarations=self.declarations,
        _optimized=False,
      )
    return self._program

  def _hidden_races(
    self,
    among: Iterable[Selector] | None,
    ops: Sequence[Op],
    found: Sequence[Race],
  ) -> tuple[list[Race], str | None]:
    """The races of the program that XLA's optimizer hid
    (`xla_changes.hidden_races`), all of them before safe pairs; and why
    none could be looked for, if so."""
    if not self._shared.optimized:
      return [], None
    try:
      program = self.program()
    except ValueError as error:
      return (
        [],
        f"{xla_changes.NOT_SEEN} (Its module before optimization "
        f"could not be read: {error})",
      )
    if program is None:
      return [], xla_changes.NOT_SEEN
    optimized_placement = xla_changes.Placement(self.module)
    # A selector that picks nothing there (an op XLA made) picks nothing.
    among = None if among is None else list(among)
    if among is not None:
      among = [s for s in among if program._picks_any(s)]
    program_ops = program.ops_among(among)
    names = {op.instruction.name for op in program_ops}
    may = may_order.MayOrder(
      program.module,
      lambda i: i.name in names,
      barriers_order=self._barriers_order,
    )
    hidden = xla_changes.hidden_races(
      optimized_placement,
      found,
      ops,
      program_ops,
      may,
      program.conflict,
      program.precedes,
    )
    return hidden, None

  def _picks_any(self, selector: Selector) -> bool:
    try:
      self.select_ops(selector)
    except ValueError:
      return False
    return True

  def safe_pairs_left_out(
    self, among: Iterable[Selector] | None = None
  ) -> list[LeftOut]:
    """The pairs that ``races(among)`` leaves out because a declared safe
    pair covers them, each with that `SafePair` (`LeftOut`): what the
    declarations excuse, for reports to count."""
    return list(self.races(among).left_out)

  def _all_races(
    self, among: Iterable[Selector] | None
  ) -> tuple[list[Op], list[Race]]:
    """The ops ``races(among)`` looks at, and its pairs, those safe pairs
    cover included."""
    ops = self.ops_among(among)
    order, sites = self._order_of(ops)
    pairs = order.races(sites, [op.accesses for op in ops])
    # Each pair in the order the program made its calls, whatever order
    # XLA scheduled them in: a report's "first" is the earlier call.
    found = []
    for a, b in pairs:
      first, second, known = program_order_of(ops[a], ops[b])
      found.append(Race(first, second, order_known=known))
    # The device rule reads the partitioned module; the module before
    # optimization is the program for all devices at once, which the
    # optimized module's own check covers.
    if self.module.devices > 1 and self._shared.optimized:
      found += self._across_devices(ops, set(pairs))
    return ops, found

  def _across_devices(self, ops: Sequence[Op], known: set) -> list[Race]:
    """The device rule: an SPMD module runs on every device at once, and
    nothing in it orders a call on one device with a call on another. So
    two calls on targets declared shared across devices that may conflict
    race, a call with itself included, unless they already race on one
    device. (Collectives between them are not counted: conservative.)"""
    shared = [k for k, op in enumerate(ops) if op.shared_across_devices]
    found = []
    for n, a in enumerate(shared):
      for b in shared[n:]:
        if (a, b) in known or (b, a) in known:
          continue
        if access.conflict_across_devices(ops[a].accesses, ops[b].accesses):
          found.append(Race(ops[a], ops[b], across_devices=True))
    return found

  @_gc.without_gc
  def hasse(self, ops: Sequence[Op]) -> tuple[list[Op], list[tuple[int, int]]]:
    """`ops` in an order that extends happens-before, and the pairs of
    indices into it of an op and an op right after it (`OpOrder.hasse`)."""
    order, sites = self._order_of(ops)
    placed, arrows = order.hasse(sites)
    return [ops[n] for n in placed], arrows


def _read_targets(targets: Iterable[str] | None) -> frozenset[str] | None:
  """`targets` as a set, checked; None when not given."""
  if targets is None:
    return None
  if isinstance(targets, str):
    raise TypeError(
      f"read_targets must be an iterable of target names, not a str "
      f"({targets!r}): wrap one target in a list"
    )
  found = frozenset(targets)
  for target in found:
    if not isinstance(target, str):
      raise TypeError(
        f"read_targets must hold target names (str), got "
        f"{type(target).__name__}: {target!r}"
      )
  return found


def _check_ops(analysis: OrderAnalysis, ops: Iterable[object]) -> None:
  """Raises unless every one of `ops` is an `Op` of `analysis`'s module.

  An `Op` of another module may share its computation and instruction names
  (``ffi_call.2``), and would be answered for the wrong instruction.
  """
  for op in ops:
    if not isinstance(op, Op):
      raise TypeError(
        "expected an Op (from select_ops, ops_among or user_native_calls), "
        f"got {type(op).__name__}: {op!r}"
      )
    if analysis._ops.get((op.computation, op.name)) is op:
      continue  # Made by `analysis` itself: the usual case, and fast.
    graph = None
    if op.computation in analysis.module.computations:
      graph = analysis._dataflow[op.computation]
    if graph is None or op.name not in graph.index:
      ours = None
    else:
      ours = analysis.op(graph.instructions[graph.index[op.name]])
    if ours != op or ours.instruction != op.instruction:
      raise ValueError(
        f"{op.label()} is not an op of this module: ask the OrderAnalysis "
        "whose select_ops or ops_among returned it"
      )


def _operand_elements(graph, instruction: _hlo.Instruction) -> bool:
  """Whether an operand of `instruction` is an array with an element (an
  ordered effect's token is none: nothing entangles one)."""
  for name in instruction.operands:
    position = graph.index.get(name)
    if position is None:
      return True  # Not known here: claim nothing.
    operand = graph.instructions[position]
    if not operand.zero_sized and not operand.shape.startswith("token["):
      return True
  return False


def _empty_witness_entangles(
  module: _hlo.Module,
) -> list[_hlo.Instruction]:
  """The entangle calls of `module` whose witnesses (the operands that no
  result aliases) all hold no bytes."""
  found = []
  for body in module.computations.values():
    by_name = {i.name: i for i in body}
    for i in body:
      if i.target != ENTANGLE_TARGET:
        continue
      witnesses = [
        by_name[name]
        for n, name in enumerate(i.operands)
        if n not in i.aliased_operands
      ]
      if witnesses and all(w.zero_sized for w in witnesses):
        found.append(i)
  return found


def _with_entry_shardings(compiled: CompiledModule, who: str) -> str:
  """`compiled`'s optimized text, with the entry parameters' shardings
  that the optimized module of jax 0.11 and newer no longer prints taken
  from the ``Compiled`` (`entry_shardings`); text given as text is read as
  it is (`entangle_jax.testing._ways_in.module_files` completes a dumped
  module from the module before optimization)."""
  text = module_text(compiled, who=who)
  if not isinstance(compiled, str):
    text = _with_host_callback_order(compiled, text)
  if isinstance(compiled, str) or not entry_shardings.missing(text):
    return text
  count = len(entry_shardings.parameters(text))
  found = entry_shardings.from_compiled(compiled, count)
  return entry_shardings.complete(text, found)


def _with_host_callback_order(compiled: CompiledModule, text: str) -> str:
  """`text`, for a TPU module with host callbacks analysed from a
  ``jax.stages.Lowered``, with the order that ``optimization_barrier``
  gives them in the module before optimization, which the ``Lowered``
  prints (`host_callbacks.complete`). A ``Compiled`` holds no such
  module: its analysis sees the order that data gives alone."""
  if not host_callbacks.has_transfer_callbacks(text):
    return text
  before = lowered_hlo_text(compiled)
  return text if before is None else host_callbacks.complete(text, before)


class _ObjectOperands(Sequence):
  """The operands of custom call `instruction` as the access policy reads
  them: the one it names as the object is followed back to its
  `ObjectRef` (`ObjectFinder.object_of`, which asks the policy which
  operand that is), only when read."""

  def __init__(self, finder: ObjectFinder, instruction: _hlo.Instruction):
    self._finder = finder
    self._instruction = instruction

  def __len__(self) -> int:
    return len(self._instruction.operands)

  def __getitem__(self, k):  # Sequence's overloads: an int here.
    if k != self._finder.object_operand(self._instruction):
      return None  # Only the object operand names an object.
    return self._finder.object_of(self._instruction)
