"""The order oracle: an analysis' claims against what XLA:CPU did.

Two independent judges of the claims `claims` reads from an analysis:

* `runtime_refutations`: the call log of many runs. A claimed "a before b"
  is refuted by any run where an execution of b started before an
  execution of a (in the same iterations of the loops around both) had
  ended; a claimed "not a race" between conflicting calls (`conflicting`)
  is refuted when they overlapped or ran both ways. An observed order can
  only refute a claim, never confirm one, so a correct analysis cannot fail
  here however the threads fall.
* `graph_refutations`: the execution graph XLA:CPU logs when it builds each
  thunk executor (`ExecutionGraphs`). A thunk starts only after every thunk
  it depends on finished, so a claimed order needs a path in that graph;
  the graph may order more than the analysis does (buffer reuse adds
  edges), never less than a correct analysis claims.

Within one loop iteration is how the analysis orders two calls of one loop
body; different iterations are not compared. A loop's condition and its
body are sequenced by the loop itself, not by the graph: claims between
them are not judged here.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re

from tests.oracle import oracle_programs

HAPPENS_BEFORE_SAMPLE = 24
"""Pairs per program also asked through ``happens_before`` (selectors);
every pair is asked through ``precedes``."""


@dataclasses.dataclass(frozen=True)
class Event:
  """One execution of a call, from the call log or a callback."""

  tag: int
  iteration: int
  start: int
  end: int


@dataclasses.dataclass
class Claims:
  """What an analysis says about the calls of one program."""

  ops: dict  # tag -> the analysis' ops for scope op<tag>
  ordered: set[tuple[int, int]]  # (a, b): every a precedes every b
  not_racing: set[frozenset[int]]
  disagreements: list[str] = dataclasses.field(default_factory=list)
  """Pairs on which ``precedes`` and ``happens_before`` answer differently:
  two ways of asking one question, so any is a bug, whatever the runs say."""


def claims(analysis, program: oracle_programs.Program) -> Claims:
  """Reads the claims through `OrderAnalysis`'s public methods."""
  ops = {t: analysis.select_ops(f"op{t}") for t in program.tags}
  ordered = {
    (a, b)
    for a, b in itertools.permutations(ops, 2)
    if all(analysis.precedes(x, y) for x in ops[a] for y in ops[b])
  }
  pairs = list(itertools.permutations(ops, 2))
  sample = random.Random(program.seed).sample(
    pairs, min(HAPPENS_BEFORE_SAMPLE, len(pairs))
  )
  disagreements = []
  for a, b in sample:
    by_selectors = analysis.happens_before(f"op{a}", f"op{b}")
    if by_selectors != ((a, b) in ordered):
      disagreements.append(
        f"op{a} before op{b}: happens_before says {by_selectors}, "
        f"precedes says {(a, b) in ordered}"
      )
    if by_selectors:
      ordered.add((a, b))
  tag_of = {op.name: t for t, found in ops.items() for op in found}
  racing = {
    frozenset((tag_of[r.first.name], tag_of[r.second.name]))
    for r in analysis.races([f"op{t}" for t in ops])
  }
  every_pair = {frozenset(p) for p in itertools.combinations(ops, 2)}
  return Claims(ops, ordered, every_pair - racing, disagreements)


def conflicting(program: oracle_programs.Program, a: int, b: int) -> bool:
  """Whether a race between the two calls must be reported: both use the
  example store, and one writes. Host callbacks are left out: which
  resource a callback touches is the analysis' to decide."""
  kinds = {program.kinds[a], program.kinds[b]}
  return "callback" not in kinds and "write" in kinds


def shared_loops(
  program: oracle_programs.Program, a: int, b: int
) -> int | None:
  """How many loops around both calls their executions are matched on, or
  None when one is in a loop's condition and the other in its body."""
  shared = 0
  for x, y in zip(program.sites[a].loops, program.sites[b].loops, strict=False):
    if x == y:
      shared += 1
    elif x[0] == y[0]:
      return None
    else:
      break
  return shared


def _matched(program, a, b, events_a, events_b, shared):
  depth_a = len(program.sites[a].loops)
  depth_b = len(program.sites[b].loops)
  for x in events_a:
    key = oracle_programs.counters(x.iteration, depth_a)[:shared]
    for y in events_b:
      if oracle_programs.counters(y.iteration, depth_b)[:shared] == key:
        yield x, y


def runtime_refutations(
  program: oracle_programs.Program, claimed: Claims, runs: list[list[Event]]
) -> list[str]:
  """Every way the runs contradict `claimed`; empty when none does."""
  found = []
  by_run = [_by_tag(events) for events in runs]
  for a, b in sorted(claimed.ordered):
    shared = shared_loops(program, a, b)
    if shared is None:
      continue
    for n, by_tag in enumerate(by_run):
      for x, y in _matched(
        program, a, b, by_tag.get(a, []), by_tag.get(b, []), shared
      ):
        if not x.end < y.start:
          found.append(f"run {n}: op{a} is claimed before op{b}: {x}, {y}")
  for pair in sorted(claimed.not_racing, key=sorted):
    a, b = sorted(pair)
    shared = shared_loops(program, a, b)
    if shared is None or not conflicting(program, a, b):
      continue
    directions = set()
    for n, by_tag in enumerate(by_run):
      for x, y in _matched(
        program, a, b, by_tag.get(a, []), by_tag.get(b, []), shared
      ):
        if x.end < y.start:
          directions.add("first")
        elif y.end < x.start:
          directions.add("second")
        else:
          found.append(f"run {n}: op{a} and op{b}, no race, overlap: {x}, {y}")
    if len(directions) == 2:
      found.append(f"op{a} and op{b}, no race, ran in both orders")
  return found


def _by_tag(events):
  by_tag: dict[int, list[Event]] = {}
  for e in events:
    by_tag.setdefault(e.tag, []).append(e)
  return by_tag


def overlapping(events: list[Event]) -> bool:
  """Whether any two calls of one run overlapped in time."""
  ordered = sorted(events, key=lambda e: e.start)
  latest_end = -1
  for e in ordered:
    if e.start < latest_end:
      return True
    latest_end = max(latest_end, e.end)
  return False


# The execution graph ----------------------------------------------------------

_EXECUTOR = re.compile(r"^ThunkExecutor: #thunks=(\d+)", re.MULTILINE)
_THUNK = re.compile(
  r"^ thunk #\d+: op_name=(?P<name>[^,]+), kind=[^,]+, "
  r"dependencies=\[(?P<deps>[^\]]*)\]"
)
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) \(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = ")
_CALLED = re.compile(
  r"\b(?:condition|body|true_computation|false_computation|to_apply)="
  r"%([\w.\-]+)|\bbranch_computations=\{([^}]*)\}"
)


def executor_graphs(log: str) -> list[dict[str, list[str]]]:
  """Each executor the log shows: thunk name -> the thunks it waits for.

  XLA:CPU prints them (``thunk_executor.cc``, verbosity 6) as
  ``ThunkExecutor: #thunks=N ...`` and one `` thunk #i: op_name=...,
  kind=..., dependencies=[...]`` line per thunk.
  """
  graphs = []
  lines = log.splitlines()
  for n, line in enumerate(lines):
    header = _EXECUTOR.match(line)
    if header is None:
      continue
    graph = {}
    for thunk_line in lines[n + 1 : n + 1 + int(header.group(1))]:
      thunk = _THUNK.match(thunk_line)
      if thunk is None:
        raise ValueError(f"not a thunk line: {thunk_line!r}")
      deps = [d.strip() for d in thunk.group("deps").split(",")]
      graph[thunk.group("name")] = [d for d in deps if d]
    graphs.append(graph)
  return graphs


class CallTree:
  """Which computation each instruction of a module is in, and which
  instructions call each computation (loops, conditionals, calls)."""

  def __init__(self, module_text: str):
    self.computation_of: dict[str, str] = {}
    self.callers: dict[str, list[str]] = {}
    entry = current = None
    for line in module_text.splitlines():
      head = _COMPUTATION.match(line)
      if head is not None:
        current = head.group(1)
        if line.startswith("ENTRY"):
          entry = current
        continue
      instruction = _INSTRUCTION.match(line)
      if instruction is None or current is None:
        continue
      name = instruction.group(1)
      self.computation_of[name] = current
      for called in _CALLED.finditer(line):
        names = called.group(1) or called.group(2)
        for computation in names.split(","):
          computation = computation.strip().lstrip("%")
          self.callers.setdefault(computation, []).append(name)
    if entry is None:
      raise ValueError("no ENTRY computation in the module text")
    self.entry: str = entry

  def paths(self, name: str) -> list[list[tuple[str, str]]]:
    """Each way the entry reaches instruction `name`, as
    ``[(computation, instruction), ...]`` from the entry down."""
    computation = self.computation_of[name]
    if computation == self.entry:
      return [[(computation, name)]]
    return [
      [*path, (computation, name)]
      for caller in self.callers.get(computation, [])
      for path in self.paths(caller)
    ]


class ExecutionGraphs:
  """The logged graphs of one compiled module, by computation."""

  def __init__(self, module_text: str, log: str):
    self.calls = CallTree(module_text)
    self.graphs = {}
    for graph in executor_graphs(log):
      computations = {self.calls.computation_of.get(t) for t in graph}
      if len(computations) == 1 and None not in computations:
        self.graphs[computations.pop()] = graph
    if self.calls.entry not in self.graphs:
      raise ValueError("the log holds no execution graph of the module")

  def _reaches(self, computation: str, a: str, b: str) -> bool:
    graph, seen, stack = self.graphs[computation], {b}, [b]
    while stack:
      for dep in graph.get(stack.pop(), []):
        if dep == a:
          return True
        if dep not in seen:
          seen.add(dep)
          stack.append(dep)
    return False

  def orders(self, a: str, b: str) -> bool | None:
    """Whether the graphs run instruction `a` before `b`; None when they
    cannot tell (a loop's condition and body, two branches, nesting)."""
    verdicts = {
      self._path_order(pa, pb)
      for pa in self.calls.paths(a)
      for pb in self.calls.paths(b)
    }
    return None if None in verdicts or not verdicts else all(verdicts)

  def _path_order(self, pa, pb) -> bool | None:
    for (ca, xa), (cb, xb) in zip(pa, pb, strict=False):
      if ca != cb:
        return None
      if xa != xb:
        return self._reaches(ca, xa, xb) if ca in self.graphs else None
    return None


def graph_refutations(
  program: oracle_programs.Program, claimed: Claims, graphs: ExecutionGraphs
) -> list[str]:
  """Every claim the execution graphs contradict; empty when none does."""
  found = []
  for a, b in sorted(claimed.ordered):
    for x in claimed.ops[a]:
      for y in claimed.ops[b]:
        if graphs.orders(x.name, y.name) is False:
          found.append(
            f"op{a} is claimed before op{b}; no path {x.name} -> {y.name}"
          )
  for pair in sorted(claimed.not_racing, key=sorted):
    a, b = sorted(pair)
    if not conflicting(program, a, b):
      continue
    for x in claimed.ops[a]:
      for y in claimed.ops[b]:
        forward = graphs.orders(x.name, y.name)
        if forward is False and graphs.orders(y.name, x.name) is False:
          found.append(
            f"op{a} and op{b}, no race, no path between {x.name}, {y.name}"
          )
  return found
