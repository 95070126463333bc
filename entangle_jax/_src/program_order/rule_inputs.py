"""What an ordering rule (`rules`) is handed, and what it hands back: one
narrow protocol per concern, as JAX keeps one rule table per concern and
hands each rule only what it reads (``pe.dce_rules``: the used outputs and
the equation), and one result (`RuleResult`) that says what the rule
decided.

A rule names the protocol of what it needs: a first-order rule the
values' calls and objects (`Values`), a rule that binds an equation again
as one native call `NativeCalls`, a nested call `Inlined`, a rule that
rebuilds a sub-program `SubPrograms` (a loop's `Loop`), and the child
evaluations it makes for the sub-program `SubEvaluation`. Each is small
(`tests/program_order/program_order_rule_inputs_test.py` holds them to a
budget of members) and, past the first-order rules' values, read-only: a
rule never sets the interpreter's attributes. What it decides besides its
outputs (the backward chain out, the calls of a sub-program recorded as
one, what backward passes touch) it returns in its `RuleResult`, which
the interpreter records (``Context.eval_eqn``): the books (the chain,
the recorded calls, a checkpoint's saving) are kept in one place, where
their invariants are, and a rule reads as what it computes.

The interpreter's evaluation (`interpreter.Context`) is the one object
that has them all; ty checks it against each. This module imports no
interpreter: a rule that says what it reads need not import what
evaluates it, and the modules form no cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
  from entangle_jax._src.program_order.natives import NativeCall
  from entangle_jax._src.program_order.touches import Obj, OrderedCall, Part
  from entangle_jax._src.targets.declaration import Declarations


@dataclasses.dataclass(frozen=True)
class ChildStart:
  """How a rule starts a child evaluation of its sub-program
  (`SubPrograms.child`): the interpreter sets the child up from it, so no
  rule sets another's attributes.

  The child's earlier calls: where `after` is a value (an order value,
  which comes after the calls in `deps`), one call that value stands for,
  so that all its calls come after it; else those of `earlier`, each a
  value standing for a call on any object and a label (``()``: none);
  else (None) the parent's. The sub-program's values ``seed[0]`` stand
  for the parent's ``seed[1]``; `chain` is the backward chain in; `saving`
  (None: as in the parent) whether native results are saved by name (a
  rebuilt checkpoint), `recompute` whether they are taken from those saved
  (a recomputation; one inside another is one too); `log` whether to
  collect what its native calls touch (`SubEvaluation.native_log`)."""

  after: Any = None
  deps: int = 0
  earlier: Sequence[tuple[Any, str]] | None = None
  seed: tuple[Sequence[Any], Sequence[Any]] = ((), ())
  chain: Any = None
  saving: bool | None = None
  recompute: bool = False
  log: bool = False


AS_PARENT = ChildStart()
"""A child that starts as its parent: after its earlier calls, with no
values seeded and no chain in."""


class Dependences(Protocol):
  """The native calls each value comes after (as bits)."""

  def dep(self, value: Any) -> int:
    """The calls `value` comes after."""
    ...


class Values(Dependences, Protocol):
  """A value's calls and the object it names, and binding an equation: all
  a first-order rule (``entangle``, the views) reads and sets. Setting
  them goes through the interpreter's methods, which keep its tables."""

  def set_dep(self, value: Any, bits: int) -> None:
    """Records that `value` comes after the calls in `bits` too."""
    ...

  def root(self, value: Any) -> Obj:
    """The object `value` names."""
    ...

  def set_root(self, value: Any, obj: Obj) -> None:
    """Records that `value` names `obj`."""
    ...

  def view(self, eqn: Any, operand: Any, out: Any) -> None:
    """Records that `out`, a view of `operand`, names what its elements
    name."""
    ...

  def bind(self, eqn: Any, invals: list) -> list:
    """Binds `eqn` on `invals`; its results come after the calls XLA
    must compute them after."""
    ...


class NativeCalls(Protocol):
  """Ordering one equation as one native call (a rule that binds its
  primitive again with the user's rules: `rules.opaque`)."""

  @property
  def decls(self) -> Declarations:
    """The declarations in effect."""
    ...

  def bind(self, eqn: Any, invals: list) -> list:
    """Binds `eqn` on `invals` (`Values.bind`)."""
    ...

  def native(self, eqn: Any, invals: list, call: NativeCall) -> list:
    """Binds `eqn`, the native call `call`, after the earlier calls it
    conflicts with."""
    ...

  def ordered_bodies(self, eqn: Any) -> Any:
    """`eqn` with each sub-program that makes native calls in program
    order."""
    ...

  def scopes(self) -> str:
    """The named scopes in effect, in full (a Resource's records)."""
    ...


class Inlined(Protocol):
  """Evaluating a sub-program in place: a nested call that XLA inlines
  (`rules.maps.call`)."""

  def run(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list:
    """Evaluates `jaxpr` here, its equations ordered as this program's;
    its results."""
    ...


class SubEvaluation(Dependences, Inlined, Protocol):
  """A child evaluation a rule made for a sub-program (`SubPrograms.child`):
  it runs the sub-program, and the rule reads what its calls were. Each
  of its settings (earlier calls, backward chain in, checkpoint saving, a
  log of native calls) is an argument of `SubPrograms.child`, never set
  by the rule."""

  @property
  def own(self) -> Sequence[OrderedCall]:
    """The calls made in this evaluation (not in a parent's)."""
    ...

  @property
  def chain(self) -> Any:
    """The backward chain out of the sub-program, or None."""
    ...

  @property
  def prev_bit(self) -> int:
    """The call the order value it was made after stands for (`after` of
    `SubPrograms.child`), or 0."""
    ...

  @property
  def native_log(self) -> Sequence[Part] | None:
    """What every native call made in it touched, nested ones included,
    when it was made with ``log=True``; else None."""
    ...

  def mark(self, value: Any) -> int:
    """A new call's bit, which `value` comes after from now on: a probe of
    which values a sub-program's calls come after."""
    ...

  def exported(self) -> list:
    """Values that come after every call made in it."""
    ...


class SubPrograms(Dependences, Protocol):
  """What every rule that rebuilds a sub-program reads: the declarations,
  where the sub-program's calls fall among the earlier ones (an order
  value after them), the backward chain in, and child evaluations."""

  @property
  def decls(self) -> Declarations:
    """The declarations in effect."""
    ...

  def child(self, start: ChildStart = AS_PARENT) -> SubEvaluation:
    """A child evaluation of a sub-program, with this one's values,
    started as `start` says."""
    ...

  def sub_parts(self, jaxprs: Any) -> tuple[Part, ...]:
    """What the native calls of `jaxprs` touch, objects unknown."""
    ...

  def order_token(self, parts: Any, aval: Any = None) -> Any:
    """A value after the earlier calls `parts` conflict with."""
    ...

  def take_chain(self) -> Any:
    """The backward chain here (the value threaded through every rebuilt
    ``custom_vjp`` whose backward pass makes native calls), started if it
    was not."""
    ...


class ChainedSubPrograms(SubPrograms, Protocol):
  """A conditional's rule, a custom derivative's: sub-programs and the
  backward chain through them (the chain out is a `RuleResult`'s)."""


class Checkpoint(SubPrograms, Protocol):
  """A checkpoint's rule: whether its body's native results are saved,
  or taken from those saved, is said when it makes the child
  (`SubPrograms.child`)."""


class ShardMap(SubPrograms, Protocol):
  """A map's rule: where a body's native calls are collected is said when
  it makes the child (``log=True``)."""


class Loop(SubPrograms, Protocol):
  """A loop's rule: and the earlier calls (whether the carries already
  order the body after them), and the scopes in effect (whether a while
  loop's condition makes native calls)."""

  @property
  def accesses(self) -> Sequence[OrderedCall]:
    """The earlier calls a later call may conflict with."""
    ...

  def scopes(self) -> str:
    """The named scopes in effect, in full (a Resource's records)."""
    ...


@dataclasses.dataclass(frozen=True)
class Summary:
  """A sub-program's native calls, recorded as one call of the evaluation
  the rule ran in: later calls that conflict with what they touch come
  after its witnesses."""

  parts: tuple[Part, ...]
  """What the sub-program's calls touch."""
  witnesses: tuple[Any, ...]
  """The values a later call waits for (an order value, carries)."""
  deps: int
  """The earlier calls the witnesses come after besides this one."""
  label: str
  """The call's name, in warnings (``scan``, ``cond``)."""
  after: tuple[Any, ...]
  """The values that come after this call (and its `deps`) from now on."""


@dataclasses.dataclass(frozen=True)
class RuleResult:
  """What a rule decided: the equation's results, and what the interpreter
  records for it (``Context.eval_eqn``), in this order: the backward
  chain, what backward passes touch, the sub-program's calls."""

  outs: list
  """The equation's results, in its outputs' order."""
  chain: Any = None
  """The backward chain out of the equation, or None: unchanged."""
  backward: tuple[Part, ...] = ()
  """What the backward passes of a rebuilt ``custom_vjp`` touch: the
  chain's cotangent comes after the forward calls they conflict with."""
  summary: Summary | None = None
  """The sub-program's calls as one call, or None: none recorded."""


def after_sub(
  outs: Sequence[Any],
  parts: Sequence[Part],
  token: Any,
  label: str,
  deps: int = 0,
  *,
  chain: Any = None,
  backward: Sequence[Part] = (),
) -> RuleResult:
  """The result of a rule that rebuilt a sub-program: `outs`, and its calls
  (`parts`) recorded as one call, which `token` (a value, or a list of
  values) comes after, as do the calls in `deps`, which every branch's
  `token` is an entangle after. The other results depend on nothing
  (`dependence`): XLA may pass a value through a loop or a branch, and
  drop the rest."""
  tokens = tuple(token) if isinstance(token, list | tuple) else (token,)
  return RuleResult(
    list(outs),
    chain=chain,
    backward=tuple(backward),
    summary=Summary(tuple(parts), tokens, deps, label, after=tokens),
  )
