"""Shows the hazard `entangle` fixes: ``python -m entangle_jax.demo``.

Runs ``write(slot, 1); x = read(slot); write(slot, 2)`` three ways (no
ordering, ``jax.lax.optimization_barrier``, ``entangle``) and prints, for each,
how often the read saw the wrong value and whether the compiled module orders
the read before the second write. With ``--graph`` it prints, instead, each
program's native calls and their order as Mermaid graphs (Markdown).
"""

from __future__ import annotations

import argparse
import sys

import jax

from entangle_jax import _hazard, _order_graph


def verdict(ordering: _hazard.Ordering) -> str:
  ordered = _hazard.read_precedes_second_write(ordering)
  return "ordered" if ordered else "not ordered"


def table(runs: int) -> list[tuple[str, str, str]]:
  rows = []
  for ordering in _hazard.Ordering:
    wrong = _hazard.count_wrong(ordering, runs)
    rows.append((ordering.value, f"{wrong} / {runs}", verdict(ordering)))
  return rows


def render(rows: list[tuple[str, str, str]]) -> str:
  header = ("ordering", "wrong reads", "compiled HLO: read -> second write")
  widths = [max(len(r[c]) for r in [header, *rows]) for c in range(3)]
  lines = [
    "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
    for row in [header, *rows]
  ]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(line.rstrip() for line in lines)


def graphs() -> str:
  """Markdown: each ordering's name and the Mermaid graph of its program."""
  blocks = []
  for ordering in _hazard.Ordering:
    compiled = jax.jit(_hazard.program(ordering)).lower(*_hazard.arguments())
    text = _order_graph.order_graph(compiled.compile(), format="mermaid")
    blocks.append(f"{ordering.value}:\n\n```mermaid\n{text}```\n")
  return "\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--runs", type=int, default=200, help="runs per ordering (default 200)"
  )
  parser.add_argument(
    "--graph",
    action="store_true",
    help="print the programs' order as Mermaid graphs instead of running them",
  )
  args = parser.parse_args(argv)
  if args.graph:
    print(graphs(), end="")
    return 0
  if args.runs < 1:
    parser.error("--runs must be at least 1")
  platform = jax.devices()[0].platform
  print(
    f"write(slot, 1); x = read(slot); write(slot, 2) -- x must be 1.0 "
    f"({args.runs} runs each, jax {jax.__version__}, {platform})\n"
  )
  print(render(table(args.runs)))
  print(
    "\nOnly entangle gives the read a data dependency that the second write "
    "must wait for, so only entangle is ordered in the module XLA runs."
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
