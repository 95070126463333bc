"""The ordering rules of `in_program_order`, one per primitive, as JAX keeps
its per-primitive rule tables (``pe.dce_rules[scan_p]``).

A rule evaluates one equation again (``rule(ctx, eqn, invals) ->
RuleResult``), entangling the native calls it holds; ``ctx`` is what the
rule reads of the evaluation it runs in, typed by the narrow protocol of
its concern (`rule_inputs`: a first-order rule's `Values`, a loop's
`Loop`, ...), which `interpreter.Context` satisfies. The rule returns
what it decided (`rule_inputs.RuleResult`: its outputs, the backward
chain out, its sub-program's calls as one), which the interpreter records
(``Context.keep_books``): a rule sets none of the interpreter's
attributes. Each family of
primitives has its module here, which registers its rules on import
(`register`); `interpreter.Context.eval_eqn` looks the equation's primitive
up (`rule_for`). `supported` lists the families and their primitives, and
`markdown` renders that list into docs/fixing_races.md
(``uv run python tools/rule_docs.py``).

A native call (an ``ffi_call``, a callback that may have effects, a
binding's own primitive) is not a rule of this table: any first-order
primitive can be one, which its declaration or its lowering says
(`natives.native_call`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import RuleResult

RuleFn = Callable[[Any, Any, list], "RuleResult"]
"""``rule(ctx, eqn, invals) -> RuleResult``: the equation's results,
ordered, and what the rule decided. ``ctx`` is typed by each rule (a
protocol of `rule_inputs`): one table holds rules of every concern, so it
names none of them."""


@dataclasses.dataclass(frozen=True)
class Family:
  """A family of primitives: its name, what its rules do, and its module."""

  name: str
  summary: str
  module: str


@dataclasses.dataclass(frozen=True)
class OrderingRule:
  """The rule of one primitive. A higher-order rule (one that rebuilds a
  sub-program) applies only where the equation holds a native call; any
  other equation is bound as it is. A first-order rule always applies."""

  primitive: str
  family: Family
  apply: RuleFn
  higher_order: bool = True


RULES: dict[str, OrderingRule] = {}
"""Primitive name: its rule."""

FAMILIES: dict[str, Family] = {}
"""Family name: the family."""

ORDER = (
  "first order",
  "maps and sharding",
  "loops",
  "conditionals",
  "checkpoint",
  "custom derivatives",
  "custom batching and partitioning",
  "linear solves and composites",
)
"""The order `supported` lists the families in (any other one last)."""


def family(name: str, summary: str, module: str) -> Family:
  """Declares the family `name` (once, from its module)."""
  if name in FAMILIES:
    raise ValueError(f"the rule family {name!r} is declared twice")
  found = Family(name, summary, module)
  FAMILIES[name] = found
  return found


def register(
  of: Family, primitives: Sequence[str], *, higher_order: bool = True
) -> Callable[[RuleFn], RuleFn]:
  """Registers the decorated function as the rule of each of `primitives`
  (the names of one primitive across jax versions, say)."""

  def decorate(fn: RuleFn) -> RuleFn:
    for name in primitives:
      if name in RULES:
        raise ValueError(f"the primitive {name!r} has two ordering rules")
      RULES[name] = OrderingRule(name, of, fn, higher_order)
    return fn

  return decorate


def rule_for(name: str) -> OrderingRule | None:
  """The rule of the primitive named `name`, or None: bound as it is, and
  a native call inside it raises."""
  return RULES.get(name)


def supported() -> list[tuple[Family, tuple[str, ...]]]:
  """Each family (in `ORDER`) with its primitives' names."""
  families = sorted(
    FAMILIES.values(),
    key=lambda f: ORDER.index(f.name) if f.name in ORDER else len(ORDER),
  )
  return [
    (f, tuple(r.primitive for r in RULES.values() if r.family is f))
    for f in families
  ]


def markdown() -> str:
  """The table of `supported`, as docs/fixing_races.md shows it."""
  lines = [
    "| Family | Primitives | Rule |",
    "| --- | --- | --- |",
  ]
  for f, primitives in supported():
    names = ", ".join(f"`{p}`" for p in primitives)
    module = f"`rules/{f.module}.py`"
    lines.append(f"| {f.name} ({module}) | {names} | {f.summary} |")
  return "\n".join(lines) + "\n"
