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
  reads: bool = False
  """Whether the op only reads: drawn rounded (an ellipse in DOT, a stadium
  in Mermaid), where an op that may write is a box."""


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
    shape = ", shape=ellipse" if graph.nodes[n].reads else ""
    return [f'{pad}{ids[n]} [label="{label}"{shape}];']

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

# Everything but these is written as an entity code (#37; for %): Mermaid
# reads %% as a comment or directive start anywhere in the text (so
# %%{init: ...}%% in a label would configure the diagram), and quotes,
# #, &, <, >, backticks, braces and brackets as syntax or markup.
# Non-ASCII characters are coded too: Mermaid itself stores entity codes
# as text made of "\ufb02\u00b0\u00b0" ... "\u00b6\u00df", which a label
# could hold.
_MERMAID_SPECIAL = re.compile(r"[^A-Za-z0-9 _.,:;/()=+\-*!?@$^|~']")


def to_mermaid(graph: Graph) -> str:
  """A Mermaid ``flowchart``; the op ``graph.nodes[i]`` is ``n<i>``."""

  def node(n: int, pad: str) -> list[str]:
    label = "<br/>".join(_mermaid_escape(line) for line in graph.nodes[n].label)
    if graph.nodes[n].reads:
      return [f'{pad}n{n}(["{label}"])']
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
  """`text` inside a quoted Mermaid label, shown literally (a newline as a
  line break)."""
  lines = text.split("\n")
  return "<br/>".join(
    _MERMAID_SPECIAL.sub(lambda m: f"#{ord(m.group())};", line)
    for line in lines
  )


# Nesting --------------------------------------------------------------------


def _nest(
  nodes: Sequence[Node],
  node: Callable[[int, str], list[str]],
  cluster: Callable[[Cluster, str, list[str]], list[str]],
) -> list[str]:
  """Lines for every node, each cluster's members inside it.

  `node(i, pad)` and `cluster(c, pad, inner_lines)` write one format's
  statements. Items keep the order of each group's first node. No
  recursion: clusters may nest as deeply as computations do.
  """
  # The tree of clusters: children (node indices or cluster numbers) in
  # order of their first node.
  children: dict[int | None, list[int | Cluster]] = {None: []}
  for n, item in enumerate(nodes):
    parent: int | None = None
    for c in item.clusters:
      if c.number not in children:
        children[c.number] = []
        children[parent].append(c)
      parent = c.number
    children[parent].append(n)
  lines: list[str] = []
  # Each frame: the cluster (None at the top), its children, the next
  # child's place and the lines made so far.
  stack: list[tuple[Cluster | None, list[int | Cluster], int, list[str]]]
  stack = [(None, children[None], 0, lines)]
  while stack:
    c, items, place, out = stack.pop()
    if place == len(items):
      if c is not None:
        pad = "  " * len(stack)
        stack[-1][3].extend(cluster(c, pad, out))
      continue
    stack.append((c, items, place + 1, out))
    item = items[place]
    if isinstance(item, Cluster):
      stack.append((item, children[item.number], 0, []))
    else:
      out.extend(node(item, "  " * len(stack)))
  return lines
