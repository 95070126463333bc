"""Writes an order graph as Graphviz DOT or as a Mermaid flowchart.

`Graph` is what `entangle_jax.testing.order_graph` draws, before it is
written in a format; see that function for what the picture means.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence


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
