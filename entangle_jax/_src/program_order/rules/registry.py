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
(`natives.native_call`). What a host callback's primitive can take to be
ordered by (a carrier operand, a carrier result) is a table of its own
(`CARRIERS`, filled by `rules.host_callbacks`).
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


CarrierBind = Callable[[Any, list, bool, bool], list]
"""``bind(eqn, invals, adds_operand, adds_result) -> outs``: a host
callback's equation bound to `invals`, whose last value is the carrier
operand when `adds_operand`, with one more int32 result, last, when
`adds_result`."""


@dataclasses.dataclass(frozen=True)
class CarrierRule:
  """How a host callback's primitive takes a carrier, so that it can be
  ordered as a native call where its own operands and results cannot: one
  more operand to entangle when it has none with elements (XLA replaces
  a value of no element by a constant, which orders nothing), and one
  more result for later calls to wait for when it returns none with
  elements. Its Python function sees neither: `bind` hides them.

  `takes_operand` says whether an equation can take a carrier operand;
  where it cannot, `unordered` is the warning that the call runs when XLA
  runs it (None: the interpreter raises, as for any native call with
  nothing to order it by). `adds_result` says whether an equation gets a
  result to be waited for."""

  primitive: str
  bind: CarrierBind
  takes_operand: Callable[[Any], bool]
  adds_result: Callable[[Any], bool]
  unordered: str | None = None


CARRIERS: dict[str, CarrierRule] = {}
"""Primitive name: how its host callback takes a carrier. Not ordering
rules (`RULES`): a host callback is a native call, which the interpreter
orders itself, reading this table for what its primitive can take."""


def _never(eqn: Any) -> bool:
  del eqn
  return False


def register_carrier(
  primitives: Sequence[str],
  *,
  takes_operand: Callable[[Any], bool],
  adds_result: Callable[[Any], bool] = _never,
  unordered: str | None = None,
) -> Callable[[CarrierBind], CarrierBind]:
  """Registers the decorated function as the carrier binding of each of
  `primitives` (`CarrierRule` says what the arguments mean)."""

  def decorate(fn: CarrierBind) -> CarrierBind:
    for name in primitives:
      if name in CARRIERS:
        raise ValueError(f"the primitive {name!r} has two carrier rules")
      CARRIERS[name] = CarrierRule(
        name, fn, takes_operand, adds_result, unordered
      )
    return fn

  return decorate


def carrier_for(name: str) -> CarrierRule | None:
  """How the host callback primitive named `name` takes a carrier, or None:
  it takes none."""
  return CARRIERS.get(name)


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
