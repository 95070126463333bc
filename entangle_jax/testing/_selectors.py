"""Which ops a selector picks: custom-call targets and named scopes.

A selector is a string. It picks every custom call whose target equals it
and, by the name of a ``jax.named_scope`` (`scope_matches`), the effectful
work in that scope (`is_effectful`), or every op there when the caller asks
for all ops. With no selectors, ``races`` and ``order_graph`` look at the
user's native calls (`is_user_native_call`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax.testing import _hlo_parse

Selector = str
"""A custom-call target or a ``jax.named_scope`` name."""

EFFECTFUL_OPCODES = frozenset(
  {
    "send",
    "send-done",
    "recv",
    "recv-done",
    "infeed",
    "outfeed",
    "all-reduce",
    "all-reduce-start",
    "all-reduce-done",
    "all-gather",
    "all-gather-start",
    "all-gather-done",
    "all-to-all",
    "ragged-all-to-all",
    "reduce-scatter",
    "collective-broadcast",
    "collective-permute",
    "collective-permute-start",
    "collective-permute-done",
    "rng",
    "rng-get-and-update-state",
  }
)
"""Opcodes with effects beyond their result: communication, I/O, state."""

LIBRARY_TARGET_PREFIXES = (
  "lapack_",  # jnp.linalg / lax.linalg on CPU
  "ducc_",  # FFT on CPU (older jaxlib)
  "dynamic_ducc_",
  "cusolver",  # lax.linalg on CUDA
  "cublas",
  "__cublas$",  # XLA:GPU's GEMMs
  "__cudnn$",
  "cu_",  # jaxlib's CUDA kernels (threefry, LU pivots)
  "hipsolver",
  "hipblas",
  "hip_",
  "__gpu$",  # XLA:GPU's own custom calls
  "__triton",  # Pallas/Triton kernels: pure functions of their buffers
  "mosaic_gpu",
  "tpu_custom_call",
  "__onednn$",
  "xla_python_",  # host callbacks, ordered by JAX's own tokens
  "xla_ffi_python_",
  "xla.",
)
"""Custom-call target prefixes of JAX's and XLA's own library kernels."""

LIBRARY_TARGETS = frozenset(
  {
    "Sharding",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "MoveToHost",
    "MoveToDevice",
    "annotate_device_placement",
    "LayoutConstraint",
    "X64Combine",
    "X64SplitLow",
    "X64SplitHigh",
  }
)
"""Exact custom-call targets that are markers of JAX/XLA, not user calls."""

# Ops that carry metadata but are bookkeeping, never selected.
BOOKKEEPING = frozenset(
  {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
)
# Component wrappers that are function names, not transformations of a scope.
_FUNCTION_WRAPPERS = frozenset({"jit", "pjit"})
_WRAPPER_START = re.compile(r"([A-Za-z_]\w*)\(")


def is_effectful(instruction: _hlo_parse.Instruction) -> bool:
  """Whether a named-scope selector picks `instruction` (by default).

  Effectful work is every custom call except entangle's own no-op (user FFI
  calls, library kernels, host callbacks) and every instruction whose opcode
  is in `EFFECTFUL_OPCODES`. Arithmetic, copies, fusions, bitcasts and
  control flow are not: XLA copies ``op_name`` metadata onto ops it derives
  from a call's result, and those have no observable order.
  """
  if instruction.opcode == "custom-call":
    return instruction.target != ENTANGLE_TARGET
  return instruction.opcode in EFFECTFUL_OPCODES


def is_library_target(target: str) -> bool:
  """Whether `target` is one of JAX's or XLA's own custom-call targets."""
  return target in LIBRARY_TARGETS or target.startswith(LIBRARY_TARGET_PREFIXES)


def is_user_native_call(instruction: _hlo_parse.Instruction) -> bool:
  """Whether ``races`` looks at `instruction` when given no selectors.

  These are custom calls to targets other than entangle's own and other
  than JAX's and XLA's library targets (`is_library_target`): the FFI calls
  your code registered, side-effecting or not.
  """
  return (
    instruction.opcode == "custom-call"
    and instruction.target is not None
    and instruction.target != ENTANGLE_TARGET
    and not is_library_target(instruction.target)
  )


def scope_matches(selector: str, op_name: str) -> bool:
  """Whether `selector` names a ``jax.named_scope`` in `op_name`.

  The selector must equal one or more whole ``/``-separated components
  (so scopes may contain ``/`` and parentheses), either as written or with
  transformation wrappers such as ``vmap(...)``, ``jvp(...)`` and
  ``transpose(...)`` removed. ``jit(name)`` components name functions, not
  scopes, and are never matched.
  """
  needle = f"/{selector}/"
  for variant in _merged_variants(op_name):
    for text in {variant, _unwrap_transforms(variant)}:
      if needle in _strip_function_components(text):
        return True
  return False


def _merged_variants(op_name: str, limit: int = 64) -> list[str]:
  """The op names XLA merged into one, e.g. ``f/(a/x:b/y)`` -> f/a/x, f/b/y.

  When XLA merges equal ops (CSE), it keeps the common prefix of their
  ``op_name`` and joins the rest as ``(first:second)``.
  """
  variants = [op_name]
  done = []
  while variants and len(done) + len(variants) <= limit:
    name = variants.pop()
    components = _split_components(name)
    for n, component in enumerate(components):
      if component.startswith("(") and component.endswith(")"):
        alternatives = _split_top_level(component[1:-1], ":")
        if len(alternatives) > 1:
          for alternative in alternatives:
            rest = components[n + 1 :]
            variants.append("/".join([*components[:n], alternative, *rest]))
          break
    else:
      done.append(name)
  return done + variants


def _split_top_level(text: str, separator: str) -> list[str]:
  """Splits `text` on `separator` outside parentheses."""
  parts, depth, start = [], 0, 0
  for i, c in enumerate(text):
    depth += (c == "(") - (c == ")")
    if c == separator and depth <= 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return parts


def _strip_function_components(op_name: str) -> str:
  """``/op_name/`` with ``jit(...)``-style components blanked out."""
  parts = []
  for component in _split_components(op_name):
    head = _WRAPPER_START.match(component)
    is_function = (
      head is not None
      and head.group(1) in _FUNCTION_WRAPPERS
      and component.endswith(")")
    )
    parts.append("\0" if is_function else component)
  return "/" + "/".join(parts) + "/"


def _split_components(op_name: str) -> list[str]:
  return _split_top_level(op_name, "/")


def _unwrap_transforms(op_name: str) -> str:
  """Replaces ``vmap(x)``-style components by ``x``, recursively."""
  out = []
  for component in _split_components(op_name):
    head = _WRAPPER_START.match(component)
    while (
      head is not None
      and head.group(1) not in _FUNCTION_WRAPPERS
      and component.endswith(")")
      and _balanced(component[head.end() : -1])
    ):
      component = _unwrap_transforms(component[head.end() : -1])
      head = _WRAPPER_START.match(component)
    out.append(component)
  return "/".join(out)


def _balanced(text: str) -> bool:
  depth = 0
  for c in text:
    depth += (c == "(") - (c == ")")
    if depth < 0:
      return False
  return depth == 0


def picks(selector: Selector, i: _hlo_parse.Instruction, all_ops: bool) -> bool:
  """Whether `selector` picks instruction `i` (see the module docstring)."""
  if i.opcode == "custom-call" and i.target == selector:
    return True
  return is_selectable(i, all_ops) and scope_matches(selector, i.op_name)


def is_selectable(i: _hlo_parse.Instruction, all_ops: bool) -> bool:
  """Whether a scope selector may pick `i`: it has a scope, is not
  bookkeeping, and is effectful unless `all_ops`."""
  if i.opcode in BOOKKEEPING or not i.op_name:
    return False
  return all_ops or is_effectful(i)


def no_match_message(
  selector: Selector,
  instructions: Iterable[_hlo_parse.Instruction],
  all_ops: bool,
) -> str:
  """Says that `selector` picks nothing, listing what could be picked."""
  instructions = list(instructions)
  targets = sorted({i.target for i in instructions if i.target})
  scopes = sorted(
    {i.op_name for i in instructions if is_selectable(i, all_ops)}
  )
  return (
    f"selector {selector!r} matches no op of the compiled module. "
    f"Custom-call targets: {targets}. Scopes of selectable ops "
    f"(op_name): {scopes}."
  )


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
  if not isinstance(selector, str):
    raise TypeError(
      f"a selector must be a str (a custom-call target or a named scope), "
      f"not {type(selector).__name__}: {selector!r}"
    )
  if not selector:
    raise ValueError("a selector must not be empty")
