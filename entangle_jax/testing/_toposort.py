"""One topological sort, shared by the analysis and the order graph."""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def topological_order(successors: Sequence[Sequence[int]]) -> list[int]:
  """Node indices, each after every node that has an edge to it.

  Among nodes that are ready at the same time, the lowest index comes first,
  so an order that is already topological is returned unchanged. Nodes on a
  cycle (which a dataflow graph does not have) are left out.

  Args:
    successors: ``successors[n]`` lists the nodes that node ``n`` has an
      edge to.
  """
  indegree = [0] * len(successors)
  for targets in successors:
    for t in targets:
      indegree[t] += 1
  ready = [n for n, d in enumerate(indegree) if d == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    n = heapq.heappop(ready)
    order.append(n)
    for t in successors[n]:
      indegree[t] -= 1
      if indegree[t] == 0:
        heapq.heappush(ready, t)
  return order
