"""A picture of the order XLA must keep among a compiled module's native calls.

``order_graph(compiled)`` draws the ops that ``races`` looks at (same default,
same selectors) as a directed graph in Graphviz DOT or Mermaid text:

* a node per selected op, labelled with its custom-call target, its named
  scope and the Python ``file:line`` it came from;
* an arrow ``a -> b`` where ``a`` happens before ``b`` and no other selected op
  lies between them (the transitive reduction of happens-before), so a chain
  of three calls shows two arrows;
* a dashed red line without direction between two ops that may run in either
  order: exactly the pairs ``races`` returns (ops in different branches of
  one conditional are exclusive, so no line joins them);
* a labelled box (a cluster) around the ops of each loop body, loop condition,
  conditional branch or called computation, nested as the calls are.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Literal

import jax

from entangle_jax import _hlo_order

Format = Literal["dot", "mermaid"]
FORMATS: tuple[str, ...] = ("dot", "mermaid")


@dataclasses.dataclass(frozen=True)
class Cluster:
  """The ops of one computation called by one instruction."""

  number: int  # Distinct per (calling instruction, called computation).
  label: str


@dataclasses.dataclass(frozen=True)
class Node:
  """One selected op: its instruction name, label lines and enclosing boxes."""

  name: str
  label: tuple[str, ...]
  clusters: tuple[Cluster, ...]  # Outermost first.


@dataclasses.dataclass(frozen=True)
class Graph:
  """What the picture shows, before it is written in a format."""

  nodes: tuple[Node, ...]
  edges: tuple[tuple[int, int], ...]  # Indices into nodes: before, after.
  races: tuple[tuple[int, int], ...]  # Indices into nodes, unordered pairs.


def order_graph(
  compiled: jax.stages.Compiled | jax.stages.Lowered | str,
  among: Sequence[_hlo_order.Selector] | None = None,
  format: Format = "dot",
  *,
  all_ops: bool = False,
) -> str:
  """The order among a compiled module's native calls, as graph text.

  Args:
    compiled: a ``jax.stages.Compiled``, a ``jax.stages.Lowered`` (compiled
      here) or the optimized HLO text.
    among: selectors choosing the ops to draw, with the same rules and the
      same default as ``races``: by default the user's native calls
      (``is_user_native_call``).
    format: ``"dot"`` (Graphviz: ``dot -Tsvg``) or ``"mermaid"`` (a
      ``flowchart``, which Markdown renderers draw in a fenced ``mermaid``
      block).
    all_ops: as for ``races``: let scope selectors pick every op in the
      scope, not only effectful work.

  Returns:
    The graph's text. Arrows are the transitive reduction of happens-before
    among the drawn ops; dashed red lines without arrowheads join the pairs
    that ``races`` returns (none joins ops of two branches of one
    conditional, which are exclusive); loop bodies, loop conditions,
    conditional branches and called computations are labelled clusters (a
    computation called from several places is drawn inside the clusters of
    its first call site).

  Raises:
    ValueError: `format` is neither ``"dot"`` nor ``"mermaid"``, or a selector
      matches nothing.
    TypeError: `among` is a string rather than a sequence of selectors.
  """
  if format not in FORMATS:
    raise ValueError(
      f"order_graph: unknown format {format!r}; expected one of {FORMATS}"
    )
  graph = build(_hlo_order.OrderAnalysis(compiled, all_ops=all_ops), among)
  return to_dot(graph) if format == "dot" else to_mermaid(graph)


# What is drawn --------------------------------------------------------------


def build(
  analysis: _hlo_order.OrderAnalysis,
  among: Sequence[_hlo_order.Selector] | None,
) -> Graph:
  """Nodes, reduced happens-before edges and race pairs of `analysis`."""
  ops = analysis.ops_among(among)
  before = [[a is not b and analysis.precedes(a, b) for b in ops] for a in ops]
  # Draw in an order that respects happens-before, as one reads a program.
  order = _topological(before)
  ops = [ops[n] for n in order]
  before = [[before[a][b] for b in order] for a in order]
  races = [
    (a, b)
    for a, b in itertools.combinations(range(len(ops)), 2)
    if analysis.is_race(ops[a], ops[b])
  ]
  numbers: dict[tuple[str, str], int] = {}
  nodes = tuple(
    Node(
      op.name,
      _label(op),
      tuple(
        Cluster(numbers.setdefault(key, len(numbers)), label)
        for key, label in _clusters(analysis, op)
      ),
    )
    for op in ops
  )
  return Graph(nodes, _reduction(before), tuple(races))


def _reduction(before: list[list[bool]]) -> tuple[tuple[int, int], ...]:
  """The pairs ``a`` before ``b`` with no ``c`` between them."""
  # Bitsets: after[a] holds the ops `a` precedes. An arrow a -> b is implied
  # when b follows some op that follows a.
  after = [sum(1 << b for b, p in enumerate(row) if p) for row in before]
  edges = []
  for a, successors in enumerate(after):
    implied = 0
    for c in _bits(successors):
      implied |= after[c]
    edges += [(a, b) for b in _bits(successors & ~implied)]
  return tuple(edges)


def _bits(mask: int) -> list[int]:
  return [n for n in range(mask.bit_length()) if mask >> n & 1]


def _topological(before: list[list[bool]]) -> list[int]:
  """Indices, each after all that precede it, otherwise in their own order."""
  waiting = [sum(column) for column in zip(*before, strict=True)]
  placed = [False] * len(before)
  order: list[int] = []
  while len(order) < len(before):
    # The first op that nothing unplaced precedes; one exists, as
    # happens-before has no cycles.
    n = next(n for n, w in enumerate(waiting) if w == 0 and not placed[n])
    placed[n] = True
    order.append(n)
    for m, precedes in enumerate(before[n]):
      waiting[m] -= precedes
  return order


def _label(op: _hlo_order.Op) -> tuple[str, ...]:
  """Target (or opcode), named scope and ``file:line``, as races reports."""
  lines = (op.target or op.instruction.opcode, op.scope, op.location)
  return tuple(line for line in lines if line)


def _clusters(
  analysis: _hlo_order.OrderAnalysis, op: _hlo_order.Op
) -> list[tuple[tuple[str, str], str]]:
  """The boxes around `op`, outermost first: (site, computation), label.

  A computation called from several places is drawn where its first call
  site (in module text order) puts it.
  """
  paths = analysis._call_paths(op)
  if not paths:
    return []
  return [
    ((site.name, inner.computation), _cluster_label(site, inner.computation))
    for site, inner in itertools.pairwise(paths[0])
  ]


def _cluster_label(site: _hlo_order.Op, computation: str) -> str:
  """Names the role of `computation` for the instruction that calls it."""
  instruction = site.instruction
  if instruction.opcode == "while":
    body = computation == instruction.body
    return f"{'loop body' if body else 'loop condition'} of {site.name}"
  if instruction.opcode == "conditional":
    branch = instruction.callees.index(computation)
    return f"branch {branch} of {site.name}"
  if site.name == instruction.opcode:  # e.g. "%call = ... call(...)"
    return site.name
  return f"{instruction.opcode} {site.name}"


# DOT ------------------------------------------------------------------------

_DOT_EDGE = "  {} -> {};"
# A race line does not rank its ends: either may come first.
_DOT_RACE = "  {} -> {} [dir=none, style=dashed, color=red, constraint=false];"


def to_dot(graph: Graph) -> str:
  """Graphviz text: ``dot -Tsvg`` renders it."""
  ids = [_dot_quote(node.name) for node in graph.nodes]

  def node(n: int, pad: str) -> list[str]:
    label = "\\n".join(_dot_escape(line) for line in graph.nodes[n].label)
    return [f'{pad}{ids[n]} [label="{label}"];']

  def cluster(c: Cluster, pad: str, inner: list[str]) -> list[str]:
    return [
      f"{pad}subgraph cluster_{c.number} {{",
      f'{pad}  label="{_dot_escape(c.label)}";',
      f"{pad}  style=rounded;",
      *inner,
      f"{pad}}}",
    ]

  lines = [
    "digraph order {",
    '  graph [fontname="Helvetica"];',
    '  node [shape=box, fontname="Helvetica"];',
    *_nest(graph.nodes, node, cluster),
  ]
  lines += [_DOT_EDGE.format(ids[a], ids[b]) for a, b in graph.edges]
  lines += [_DOT_RACE.format(ids[a], ids[b]) for a, b in graph.races]
  lines.append("}")
  return "\n".join(lines) + "\n"


def _dot_escape(text: str) -> str:
  """`text` inside a DOT double-quoted string, shown literally."""
  # Backslash starts DOT escapes (\n, \l, \N) in labels; quotes end strings.
  escaped = text.replace("\\", "\\\\").replace('"', '\\"')
  return escaped.replace("\n", "\\n")


def _dot_quote(name: str) -> str:
  return f'"{_dot_escape(name)}"'


# Mermaid --------------------------------------------------------------------

# Characters Mermaid would read as syntax, markup or entity starts in a label.
_MERMAID_SPECIAL = re.compile(r'["#&<>`\\\n]')


def to_mermaid(graph: Graph) -> str:
  """A Mermaid ``flowchart``; the op ``graph.nodes[i]`` is ``n<i>``."""

  def node(n: int, pad: str) -> list[str]:
    label = "<br/>".join(_mermaid_escape(line) for line in graph.nodes[n].label)
    return [f'{pad}n{n}["{label}"]']

  def cluster(c: Cluster, pad: str, inner: list[str]) -> list[str]:
    label = _mermaid_escape(c.label)
    return [f'{pad}subgraph c{c.number}["{label}"]', *inner, f"{pad}end"]

  lines = ["flowchart TD", *_nest(graph.nodes, node, cluster)]
  lines += [f"  n{a} --> n{b}" for a, b in graph.edges]
  lines += [f"  n{a} -.- n{b}" for a, b in graph.races]
  if graph.races:
    # linkStyle counts links in the order they are written, arrows first.
    first = len(graph.edges)
    links = ",".join(str(first + n) for n in range(len(graph.races)))
    lines.append(f"  linkStyle {links} stroke:red,stroke-dasharray:4 4")
  return "\n".join(lines) + "\n"


def _mermaid_escape(text: str) -> str:
  """`text` inside a quoted Mermaid label, shown literally."""
  return _MERMAID_SPECIAL.sub(lambda m: f"#{ord(m.group())};", text)


# Nesting --------------------------------------------------------------------


def _nest(
  nodes: Sequence[Node],
  node: Callable[[int, str], list[str]],
  cluster: Callable[[Cluster, str, list[str]], list[str]],
  depth: int = 0,
  indices: Sequence[int] | None = None,
) -> list[str]:
  """Lines for the nodes `indices`, each cluster's members inside it.

  `node(i, pad)` and `cluster(c, pad, inner_lines)` write one format's
  statements. Items keep the order of each group's first node.
  """
  if indices is None:
    indices = range(len(nodes))
  pad = "  " * (depth + 1)
  groups: dict[int, tuple[Cluster, list[int]]] = {}
  order: list[int | tuple[Cluster, list[int]]] = []
  for n in indices:
    clusters = nodes[n].clusters
    if len(clusters) <= depth:
      order.append(n)
      continue
    c = clusters[depth]
    if c.number not in groups:
      groups[c.number] = (c, [])
      order.append(groups[c.number])
    groups[c.number][1].append(n)
  lines: list[str] = []
  for item in order:
    if isinstance(item, int):
      lines += node(item, pad)
    else:
      c, members = item
      inner = _nest(nodes, node, cluster, depth + 1, members)
      lines += cluster(c, pad, inner)
  return lines
