"""Which ops a selector picks, and which ops count as effectful.

The selector grammar, in full:

* A selector is a non-empty string. It picks every custom call whose target
  equals it, and the effectful ops (`is_effectful`) in named scopes of that
  name (every op there, for an analysis made with ``all_ops=True``).
* An op's ``op_name`` metadata is split at every ``/`` into components: the
  jitted function (``jit(f)``), your ``jax.named_scope`` names, outermost
  first, and last the JAX primitive (``ffi_call``, ``io_callback``...). The
  selector, split at ``/`` too, must equal consecutive whole components.
  So ``"step"`` picks neither ``decode(step)`` nor ``step_2``, ``"(a:b)"``
  picks a scope named ``(a:b)``, which ``"a"`` does not, and any character
  may appear in a scope name: parentheses, colons, quotes, unicode. A ``/``
  inside a scope name cannot be told apart from nesting: ``"a/b"`` picks a
  scope named ``a/b`` and a scope ``b`` inside a scope ``a`` alike.
* JAX writes a transformation around the first component opened inside it:
  ``vmap(read)``, ``transpose(jvp(read))``, or ``vmap()`` when none was.
  A component also matches with every ``vmap(``, ``jvp(`` and
  ``transpose(`` wrapper taken off, so ``"read"`` picks ``vmap(read)``.
* The components that ``Resource`` adds (``entangle_jax:read``,
  ``entangle_jax:write:<name>``) are skipped when matching, so they never
  come between two of your scopes; a selector may also name them.
* Ops that XLA merged: XLA merges identical calls that are not
  side-effecting (same target, same operands: common subexpression
  elimination). On every supported jax (0.6.2 to 0.12) the merged op keeps
  the ``op_name`` of one of them, whichever XLA visits first (not
  necessarily the first written), and the other scopes name no op: a
  selector naming only those matches nothing. Give such calls different
  operands, or select the scope that is left.

With no selectors, ``races`` and ``order_graph`` look at the native calls
(`is_user_native_call`).
"""

from __future__ import annotations

from collections.abc import Iterable

from entangle_jax._src import access_marker, access_policy
from entangle_jax._src.targets.library_kernels import is_library_target
from entangle_jax._src.targets.names import (
  ENTANGLE_TARGET,
  is_sanitizer_counter,
)
from entangle_jax.testing import _hlo
from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._hlo.opcodes import BOOKKEEPING, EFFECTFUL_OPCODES

Selector = str
"""A custom-call target or a ``jax.named_scope`` name."""


def _instruction(op: Op | _hlo.Instruction, who: str):
  """The instruction of `op`, an `Op` or an instruction (`Op.instruction`)."""
  if isinstance(op, _hlo.Instruction):
    return op
  if isinstance(op, Op):
    return op.instruction
  raise TypeError(
    f"{who}: expected an Op (from OrderAnalysis.select_ops or ops_among) or "
    f"its .instruction, got {type(op).__name__}: {op!r}"
  )


def is_user_native_call(instruction: Op | _hlo.Instruction) -> bool:
  """Whether ``races`` and ``order_graph`` look at `instruction` by default.

  `instruction` is an `Op` or its ``instruction``; anything else raises
  ``TypeError``.

  True for a custom call that may touch state outside its buffers: your FFI
  calls, side-effecting or not (a query reads native state without being
  side-effecting), and host callbacks that are side-effecting
  (``io_callback``, ordered or not, and ``jax.debug.callback``), which run
  arbitrary Python. False for entangle's own no-op, for ``pure_callback``,
  which JAX declares pure (so XLA may run it at any time, or not at all,
  and merges identical ones), and for JAX's and XLA's library kernels
  (`is_library_target`: LAPACK, cuBLAS, cuSOLVER...), which compute from
  their buffers alone; nor for the execution counter the run-time
  sanitizer adds to a module compiled inside its block
  (`is_sanitizer_counter`), which is no call of your program.
  """
  instruction = _instruction(instruction, "is_user_native_call")
  target = instruction.target
  if instruction.opcode != "custom-call" or target is None:
    return False
  if target == ENTANGLE_TARGET or is_library_target(target):
    return False
  if is_sanitizer_counter(target, instruction.op_name):
    return False
  return access_policy.counts_as_native_call(target, instruction.side_effect)


def is_effectful(instruction: Op | _hlo.Instruction) -> bool:
  """Whether a named-scope selector picks `instruction` (by default).

  `instruction` is an `Op` or its ``instruction``; anything else raises
  ``TypeError``.

  The native calls of `is_user_native_call`, and every instruction whose
  opcode is in `EFFECTFUL_OPCODES` (communication, I/O, random state).
  Arithmetic, copies, fusions, bitcasts, control flow, library kernels and
  ``pure_callback`` are not: XLA copies ``op_name`` metadata onto ops it
  derives from a call's result, and those have no effect whose order could
  be observed.
  """
  instruction = _instruction(instruction, "is_effectful")
  return is_user_native_call(instruction) or (
    instruction.opcode in EFFECTFUL_OPCODES
  )


def scope_matches(selector: str, op_name: str) -> bool:
  """Whether `selector` names scopes of `op_name` (the module docstring)."""
  parts = selector.split("/")
  for name in dict.fromkeys((access_marker.without_markers(op_name), op_name)):
    components = name.split("/")
    unwrapped = [access_marker.unwrap(c) for c in components]
    for start in range(len(components) - len(parts) + 1):
      if all(
        part in (components[start + k], unwrapped[start + k])
        for k, part in enumerate(parts)
      ):
        return True
  return False


def picks(selector: Selector, i: _hlo.Instruction, all_ops: bool) -> bool:
  """Whether `selector` picks instruction `i` (see the module docstring).
  The sanitizer's execution counter is never picked, not even by its
  target's name, which the user's host callbacks share."""
  if is_sanitizer_counter(i.target, i.op_name):
    return False
  if i.opcode == "custom-call" and i.target == selector:
    return True
  return is_selectable(i, all_ops) and scope_matches(selector, i.op_name)


def is_selectable(i: _hlo.Instruction, all_ops: bool) -> bool:
  """Whether a scope selector may pick `i`: it has a scope, is not
  bookkeeping, and is effectful unless `all_ops`."""
  if i.opcode in BOOKKEEPING or not i.op_name:
    return False
  return all_ops or is_effectful(i)


def no_match_message(
  selector: Selector,
  instructions: Iterable[_hlo.Instruction],
  all_ops: bool,
) -> str:
  """Says that `selector` picks nothing, listing what could be picked."""
  instructions = list(instructions)
  targets = sorted({i.target for i in instructions if i.target})
  scopes = sorted(
    {i.op_name for i in instructions if is_selectable(i, all_ops)}
  )
  message = (
    f"selector {selector!r} matches no op of the compiled module. "
    f"Custom-call targets: {targets}. Scopes of selectable ops "
    f"(op_name): {scopes}. (XLA deletes a call that is not side-effecting "
    "when nothing uses its result or the result holds no bytes, and merges "
    "identical ones, keeping the scope of one of them.)"
  )
  skipped = sorted(
    {
      i.target or i.opcode
      for i in instructions
      if is_selectable(i, True) and scope_matches(selector, i.op_name)
    }
  )
  if skipped:
    message += (
      f" The scope holds only ops that are not effectful ({skipped}): "
      "pass all_ops=True to pick them (pure_callback, arithmetic, library "
      "kernels)."
    )
  return message


def check_among(among: object) -> None:
  """Raises TypeError unless `among` is an iterable of selectors (and not
  one selector given as a string)."""
  if isinstance(among, str):
    raise TypeError(
      f"`among` must be a list of selectors, not the string {among!r}; "
      f"write among=[{among!r}]"
    )
  if not isinstance(among, Iterable):
    raise TypeError(f"`among` must be a list of selectors, not {among!r}")


def check_selector(selector: object) -> None:
  """Raises TypeError or ValueError for what cannot be a selector."""
  if not isinstance(selector, str):
    raise TypeError(
      f"a selector must be a str (a custom-call target or a named scope), "
      f"not {type(selector).__name__}: {selector!r}"
    )
  if not selector:
    raise ValueError("a selector must not be empty")
