"""Shows the hazard `entangle` fixes: ``python -m entangle_jax.demo``.

Runs ``write(slot, 1); x = read(slot); write(slot, 2)`` three ways (no
ordering, ``jax.lax.optimization_barrier``, ``entangle``) and prints, for each,
how often the read saw the wrong value and whether the compiled module orders
the read before the second write. Then runs the entangle version once more,
written with ``Resource``, which adds the ``entangle`` call itself. With
``--graph`` it prints, instead, each program's native calls and their order
as Mermaid graphs (Markdown).
"""

from __future__ import annotations

import argparse

import jax

from entangle_jax import testing
from entangle_jax._src import native
from entangle_jax.demo import _hazard, _resource_hazard

# The entangle row's program, written by hand and with Resource.
SIDE_BY_SIDE = (
  ("hand-written entangle", "Resource"),
  ("token = write_slot(slot, 1.0)", "res = Resource(slot)"),
  ("x = read_slot(token)", "res.write(write_slot, 1.0)"),
  ("token = entangle(token, x)", "x = res.read(read_slot)"),
  ("write_slot(token, 2.0)", "res.write(write_slot, 2.0)"),
)


def verdict(ordering: _hazard.Ordering) -> str:
  ordered = _hazard.read_precedes_second_write(ordering)
  return "ordered" if ordered else "not ordered"


def table(runs: int) -> list[tuple[str, str, str]]:
  rows = []
  for ordering in _hazard.Ordering:
    wrong = _hazard.count_wrong(ordering, runs)
    rows.append((ordering.value, f"{wrong} / {runs}", verdict(ordering)))
  return rows


def entangle_calls(compiled) -> int:
  """How many entangle custom calls a compiled module holds."""
  text = testing.module_text(compiled)
  return text.count(f'custom_call_target="{native.ENTANGLE_TARGET}"')


def resource_summary(runs: int) -> str:
  """The Resource version's wrong reads, verdict and entangle calls."""
  wrong = _resource_hazard.count_wrong(runs)
  ordered = _resource_hazard.read_precedes_second_write()
  by_hand = jax.jit(_hazard.program(_hazard.Ordering.ENTANGLE))
  hand_calls = entangle_calls(by_hand.lower(*_hazard.arguments()).compile())
  calls = entangle_calls(_resource_hazard.compiled())
  return (
    f"Resource: {wrong} of {runs} reads wrong; compiled HLO: read -> second "
    f"write {'ordered' if ordered else 'not ordered'}; entangle calls: "
    f"{calls} (hand-written: {hand_calls})"
  )


def render_side_by_side() -> str:
  width = max(len(left) for left, _ in SIDE_BY_SIDE)
  return "\n".join(
    f"  {left.ljust(width)}    {right}" for left, right in SIDE_BY_SIDE
  )


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
    text = testing.order_graph(compiled.compile(), format="mermaid")
    blocks.append(f"{ordering.value}:\n\n```mermaid\n{text}```\n")
  return "\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m entangle_jax.demo", description=__doc__.splitlines()[0]
  )
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
  print("\nThe entangle row, written both ways:\n")
  print(render_side_by_side())
  print("\n" + resource_summary(args.runs))
  return 0
