"""A picture of the order XLA must keep among a compiled module's native calls.

``order_graph(compiled)`` draws the ops that ``races`` looks at (same default,
same selectors) as a directed graph in Graphviz DOT or Mermaid text:

* a node per selected op, labelled with its custom-call target, what it
  reads or writes (`entangle_jax.testing._order.access`), its named scopes and
  the Python ``file:line`` it came from; an op that only reads is rounded
  (an ellipse in DOT, a stadium in Mermaid), one that may write is a box;
* an arrow ``a -> b`` where ``a`` happens before ``b`` and no other selected op
  lies between them (the transitive reduction of happens-before), so a chain
  of three calls shows two arrows;
* a dashed red line without direction between two ops that may conflict
  and run in either order: exactly the pairs ``races`` returns (two reads
  never conflict; ops in different branches of one conditional, or in a
  loop's condition and body, never run at once);
* a labelled box (a cluster) around the ops of each loop body, loop condition,
  conditional branch or called computation, nested as the calls are.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Literal

from entangle_jax.testing._analysis import gc as _gc
from entangle_jax.testing._analysis import selectors as _selectors
from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._analysis.selectors import Selector
from entangle_jax.testing._emitters.graph_formats import (
  Cluster,
  Graph,
  Node,
  to_dot,
  to_mermaid,
)
from entangle_jax.testing._hlo.module_text import CompiledModule
from entangle_jax.testing._order import rules

Format = Literal["dot", "mermaid"]
FORMATS: tuple[str, ...] = ("dot", "mermaid")


def order_graph(
  compiled: CompiledModule,
  among: Iterable[Selector] | None = None,
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
    ValueError: `format` is neither ``"dot"`` nor ``"mermaid"``, or as for
      ``races``: the text is not an optimized, scheduled module or cannot
      be read, or a selector is empty or matches nothing.
    TypeError: as for ``races``: `compiled` is none of those, `among` is a
      string rather than a sequence of selectors, or a selector is not a
      str.
  """
  if format not in FORMATS:
    raise ValueError(
      f"order_graph: unknown format {format!r}; expected one of {FORMATS}"
    )
  analysis = OrderAnalysis(compiled, all_ops=all_ops, who="order_graph")
  graph = build(analysis, among)
  return to_dot(graph) if format == "dot" else to_mermaid(graph)


# What is drawn --------------------------------------------------------------


@_gc.without_gc
def build(analysis: OrderAnalysis, among: Iterable[Selector] | None) -> Graph:
  """Nodes, reduced happens-before edges and race pairs of `analysis`."""
  if among is not None:  # Read twice below: a generator would be spent.
    _selectors.check_among(among)
    among = list(among)
  # Drawn in an order that extends happens-before, as one reads a program.
  ops, arrows = analysis.hasse(analysis.ops_among(among))
  place = {op: n for n, op in enumerate(ops)}
  races = sorted(
    tuple(sorted((place[race.first], place[race.second])))
    for race in analysis.races(among)
  )
  numbers: dict[tuple[str, str], int] = {}
  nodes = tuple(
    Node(
      op.name,
      _label(op),
      tuple(
        Cluster(numbers.setdefault(key, len(numbers)), label)
        for key, label in _clusters(analysis, op)
      ),
      reads=all(a.mode == "read" for a in op.accesses),
    )
    for op in ops
  )
  return Graph(nodes, tuple(arrows), tuple((a, b) for a, b in races))


def _label(op: Op) -> tuple[str, ...]:
  """Target (or opcode), access, named scope and ``file:line``."""
  lines = (
    op.target or op.instruction.opcode,
    op.access_text,
    op.user_scope,
    op.location,
  )
  return tuple(line for line in lines if line)


def _clusters(
  analysis: OrderAnalysis, op: Op
) -> list[tuple[tuple[str, str], str]]:
  """The boxes around `op`, outermost first: (site, computation), label.

  A computation called from several places is drawn where its first call
  site (in module text order) puts it.
  """
  paths = analysis.call_paths(op)
  if not paths:
    return []
  return [
    ((site.name, inner.computation), _cluster_label(site, inner.computation))
    for site, inner in itertools.pairwise(paths[0])
  ]


def _cluster_label(site: Op, computation: str) -> str:
  """Names the role of `computation` for the instruction that calls it."""
  instruction = site.instruction
  role = rules.callee_role(instruction, computation)
  if role != instruction.opcode:  # A loop's body or condition, a branch.
    return f"{role} of {site.name}"
  if site.name == role:  # e.g. "%call = ... call(...)"
    return site.name
  return f"{role} {site.name}"
