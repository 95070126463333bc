"""What an ordering rule (`rules`) is handed: one protocol per concern,
as JAX keeps one rule table per concern and hands each rule only what it
reads (``pe.dce_rules``: the used outputs and the equation).

A rule names the protocol of what it needs: a first-order rule the
values' calls and objects (`Values`), a rule that binds an equation again
as one native call `NativeCalls`, a nested call `Inlined`, a rule that
rebuilds a sub-program its family's protocol (`ChainedSubPrograms`,
`Checkpoint`, `Loop`, `ShardMap`), each made of the concerns below. The
interpreter's evaluation (`interpreter.Context`) is the one object that
has them all; ty checks it against each. This module imports no
interpreter: a rule that says what it reads need not import what
evaluates it, and the modules form no cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:
  from entangle_jax._src.program_order.natives import NativeCall
  from entangle_jax._src.program_order.touches import Obj, OrderedCall, Part
  from entangle_jax._src.targets.declaration import Declarations


class Dependences(Protocol):
  """The native calls each value comes after (as bits)."""

  def dep(self, value: Any) -> int:
    """The calls `value` comes after."""
    ...

  def set_dep(self, value: Any, bits: int) -> None:
    """Records that `value` comes after the calls in `bits` too."""
    ...


class Values(Dependences, Protocol):
  """A value's calls and the object it names, and binding an equation: all
  a first-order rule (``entangle``, the views) reads and sets."""

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

  decls: Declarations

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


class SubPrograms(Dependences, Inlined, Protocol):
  """Evaluating a sub-program in a child evaluation, and the order values
  that tie its calls to those outside: what every rule that rebuilds a
  sub-program uses."""

  decls: Declarations
  own: list[OrderedCall]
  """The calls made in this evaluation (not in a parent's)."""

  def child(self, accesses: Sequence[OrderedCall] | None = None) -> Self:
    """An evaluation of a sub-program: this one's values, and the calls
    `accesses` (by default this one's) as the earlier calls."""
    ...

  def seed(
    self, child: Self, inner: Sequence[Any], outer: Sequence[Any]
  ) -> None:
    """Values `inner` of `child`'s sub-program stand for `outer` here."""
    ...

  def exported(self, ctx: Self) -> list:
    """Values that come after every call made in child `ctx`."""
    ...

  def sub_parts(self, jaxprs: Any) -> tuple[Part, ...]:
    """What the native calls of `jaxprs` touch, objects unknown."""
    ...

  def scopes(self) -> str:
    """The named scopes in effect, in full (a Resource's records)."""
    ...

  def new_bit(self) -> int:
    """The bit of a new call of this evaluation (and its children)."""
    ...

  def order_token(self, parts: Any, aval: Any = None) -> Any:
    """A value after the earlier calls `parts` conflict with."""
    ...

  def loop_child(self, token: Any, deps: int = 0) -> Self:
    """A child evaluation whose calls all come after `token`."""
    ...

  def after_sub(
    self,
    parts: Any,
    outs: list,
    token: Any,
    invals: Any,
    label: str,
    deps: int = 0,
  ) -> list:
    """Records a sub-program's calls as one call that `token` comes
    after; `outs`, its results."""
    ...


class BackwardChain(Protocol):
  """The value threaded through every rebuilt ``custom_vjp`` whose
  backward pass makes native calls (`interpreter.Context.link`)."""

  chain: Any
  """The chain here, or None until a backward pass makes a native call."""
  backward: list[Part]
  """What those backward passes touch."""

  def take_chain(self) -> Any:
    """The chain here, started if it was not."""
    ...


class ChainedSubPrograms(SubPrograms, BackwardChain, Protocol):
  """Sub-programs and the backward chain through them: a conditional's
  rule, a custom derivative's."""


class Checkpoint(ChainedSubPrograms, Protocol):
  """A checkpoint's rule: and whether native results are saved, or taken
  from those saved (in a checkpoint's recomputation)."""

  saving: bool
  recompute: bool


class ShardMap(ChainedSubPrograms, Protocol):
  """A map's rule: and where a body's native calls are collected, nested
  ones included (for the devices' check), or None."""

  native_log: list[Part] | None


class Loop(ChainedSubPrograms, Protocol):
  """A loop's rule: and the earlier calls, and, in an iteration's
  evaluation, the call its order value stands for."""

  accesses: list[OrderedCall]
  prev_bit: int

  def summary(
    self, parts: Any, witnesses: Any, deps_in: int, label: str
  ) -> OrderedCall:
    """Records calls of `parts` as one call that `witnesses` come after."""
    ...
