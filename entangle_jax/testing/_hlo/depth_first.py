"""Depth-first search with an explicit stack, so that no nesting depth
exhausts Python's stack: for the parser's recursion check and for the
analysis's callees-first orders."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)
Label = TypeVar("Label")

_ON_PATH, _DONE = 1, 2


def post_order(
  starts: Iterable[Node],
  edges: Callable[[Node], Iterable[tuple[Node, Label]]],
  on_cycle: Callable[[Node, Node, Label], None] | None = None,
) -> list[Node]:
  """Every node reachable from `starts` through `edges`, each after all
  the nodes it reaches (except along a cycle).

  Args:
    starts: where to begin, in order.
    edges: a node's ``(successor, label)`` pairs.
    on_cycle: called as ``on_cycle(node, successor, label)`` for an edge
      back to a node on the current path; it may raise.
  """
  order: list[Node] = []
  state: dict[Node, int] = {}
  for start in starts:
    if start in state:
      continue
    state[start] = _ON_PATH
    stack: list[tuple[Node, Iterator[tuple[Node, Label]]]] = [
      (start, iter(edges(start)))
    ]
    while stack:
      node, successors = stack[-1]
      step = next(successors, None)
      if step is None:
        state[node] = _DONE
        order.append(node)
        stack.pop()
        continue
      successor, label = step
      seen = state.get(successor)
      if seen == _ON_PATH and on_cycle is not None:
        on_cycle(node, successor, label)
      if seen is None:
        state[successor] = _ON_PATH
        stack.append((successor, iter(edges(successor))))
  return order
