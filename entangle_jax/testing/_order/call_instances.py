"""The records of what may order the program's calls (`may_order.MayOrder`):
each selected call at each of its places, each loop at each of its places,
and a pair that no compiler has to keep in order; and where a call is: the
jitted helper's ``call`` that leads to it, and the Python stack it has once
XLA inlines that helper.

A computation called from two places (a jitted helper, an exported function,
a ``custom_vjp`` rule) is one call per place: XLA inlines each ``call``, so
each place's call may be moved, merged or deleted apart from the other's.
"""

from __future__ import annotations

import dataclasses

from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._hlo.attributes import Stack
from entangle_jax.testing._order.algebra import Value
from entangle_jax.testing._order.module_index import ModuleIndex


@dataclasses.dataclass
class CallInstance:
  """One selected call at one place of the program: one chain of the
  instructions that run its computation, from the entry."""

  bit: int
  instruction: Instruction
  chain: tuple[str, ...]
  """The names of the ``call``, ``while`` and ``conditional``
  instructions that lead to it, outermost first."""
  loops: tuple[int, ...]
  """The loops around it (`MayOrder.loops` indices), outermost first."""
  branches: tuple[tuple[int, int], ...]
  """The conditionals around it and the branch it is in:
  ``(conditional, branch)``, by `MayOrder`'s numbering of conditionals."""
  deps: int = 0
  """The instances its operands are computed from (and, for a call with a
  side effect, the decisions that run it)."""
  var: int = 0
  """The loops over whose iterations its operands may change."""

  @property
  def side_effect(self) -> bool:
    return self.instruction.side_effect


@dataclasses.dataclass
class Loop:
  """One ``while`` at one place of the program."""

  instruction: Instruction
  chain: tuple[str, ...]
  trips: int | None = None
  """Its trip count, where the program states it (a counter from a
  constant, stepped by a constant, compared with a constant); None
  otherwise."""
  passed_on: frozenset = frozenset()
  """The paths of the state elements its body hands back unchanged."""
  state: Value | None = None
  """What each state element is computed from, over every iteration."""
  root: Value | None = None
  """What the body's root held in the last pass."""
  not_once: bool = False
  """Whether its body, evaluated on the initial value (as a loop that
  runs once), no longer counted one trip: it is not evaluated so again,
  so that the passes do not go back and forth."""

  @property
  def may_repeat(self) -> bool:
    """Whether the loop may run its body twice or more."""
    return self.trips is None or self.trips > 1


@dataclasses.dataclass(frozen=True)
class Unordered:
  """Two call instances that no compiler has to keep in order, and why."""

  first: CallInstance
  second: CallInstance
  kind: str
  """``"order"`` (neither is computed from the other), ``"hoisted"`` (one
  may run once before the loop both are in), or ``"deleted"`` (one is a
  call without side effect whose results nothing uses)."""
  moved: CallInstance | None = None
  """For ``"hoisted"`` and ``"deleted"``: the call XLA may move or
  delete."""
  loop: Loop | None = None
  """For ``"hoisted"``: the loop it may leave."""


def exclusive(a: CallInstance, b: CallInstance) -> bool:
  """Whether `a` and `b` lie in two branches of one conditional."""
  mine = dict(a.branches)
  return any(
    conditional in mine and mine[conditional] != branch
    for conditional, branch in b.branches
  )


def call_site(index: ModuleIndex, instance: CallInstance) -> Instruction | None:
  """The innermost ``call`` of `index`'s module that leads to `instance`
  (a jitted helper's call at this place), or None where no ``call``
  does."""
  for name in reversed(instance.chain):
    found = index.named(name)
    if found is not None and found.opcode == "call":
      return found
  return None


def placed_stack(index: ModuleIndex, instance: CallInstance) -> Stack:
  """The Python stack of `instance` at its place, as XLA's inliner
  composes it: a helper's computation keeps the stack of the place JAX
  traced it at, so each ``call`` on the way swaps that place's frames
  for its own. The instruction's own stack where no ``call`` leads to
  it, or where the traced place cannot be told."""
  placed: Stack | None = None
  helper: str | None = None
  for name in instance.chain:
    call = index.named(name)
    if call is None or call.opcode != "call" or not call.callees:
      continue
    if placed is None or helper is None:
      placed = call.stack
    else:
      placed = _rebased(index, call, helper, placed)
    helper = call.callees[0]
  if placed is None or helper is None:
    return instance.instruction.stack
  return _rebased(index, instance.instruction, helper, placed)


def _rebased(
  index: ModuleIndex, i: Instruction, helper: str, placed: Stack
) -> Stack:
  """`i`'s stack, traced inside `helper` at one of its call sites, with
  that site's frames replaced by `placed`."""
  stack = i.stack
  for caller in index.callers_of(helper):
    site = caller.stack
    if (
      site
      and len(site) <= len(stack)
      and stack[len(stack) - len(site) :] == site
    ):
      return stack[: len(stack) - len(site)] + placed
  return stack
