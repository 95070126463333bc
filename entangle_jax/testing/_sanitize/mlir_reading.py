"""What the sanitizer reads off a module's MLIR (StableHLO) ops: where an
op was made (its Python stack, the user's file:line), a custom call's
typed-FFI attributes and side effect, host transfers, and how many devices
a module runs on. Nothing here edits a module (`module_edits` does)."""

from __future__ import annotations

import re

TYPED_FFI = 4
"""``api_version`` of a typed FFI custom call in StableHLO."""


def starts_a_callback(op) -> bool:
  """Whether a host ``stablehlo.send`` is its callback's first: its token
  does not come from another send (JAX chains a callback's sends, then its
  receives, through one token)."""
  try:
    token = op.operands[1]
    owner = token.owner
    name = getattr(owner, "name", None)
    if name is None:  # A block argument, or an op seen through its view.
      name = getattr(getattr(owner, "operation", None), "name", None)
  except (IndexError, AttributeError, ValueError):
    return True
  return name != "stablehlo.send"


def is_host_transfer(ir, op) -> bool:
  """Whether a ``stablehlo.send``/``recv`` goes to or from the host."""
  if "is_host_transfer" not in op.attributes:
    return False
  try:
    return bool(ir.BoolAttr(op.attributes["is_host_transfer"]).value)
  except (ValueError, TypeError):
    return False


def one_device(ir, computation) -> bool:
  """Whether a module runs on one device (one partition, one replica)."""
  attributes = computation.operation.attributes
  for name in ("mhlo.num_partitions", "mhlo.num_replicas"):
    # No OpAttributeMap.get in older bindings (jax 0.6.2).
    if name in attributes and ir.IntegerAttr(attributes[name]).value != 1:
      return False
  return True


def side_effect(ir, attributes) -> bool:
  """A custom call's ``has_side_effect`` (false when absent)."""
  if "has_side_effect" not in attributes:
    return False
  try:
    return bool(ir.BoolAttr(attributes["has_side_effect"]).value)
  except (ValueError, TypeError):
    return False


_FILE_LINE = re.compile(r'"([^"]+)":(\d+)(?::\d+)?')


_NOT_USER = (
  "/jax/",
  "/jaxlib/",
  "/entangle_jax/_src/",
  "/entangle_jax/testing/",
  "/site-packages/",
  "/dist-packages/",
  "<frozen",
)


def source_stack(op) -> tuple[tuple[str, int], ...]:
  """The Python stack `op`'s MLIR location records, innermost first, as
  ``(file, line)`` frames: the form the static check's ops carry
  (``Instruction.stack``), so that a call of the sanitized copy is found
  among the ops of the user's own module; () where it names no file."""
  try:
    text = str(op.location)
  except Exception:
    return ()
  return tuple((path, int(line)) for path, line in _FILE_LINE.findall(text))


def source_line(op) -> str:
  """The user's file:line of `op`, from its MLIR location (the innermost
  frame outside JAX, entangle_jax and installed packages; else the
  innermost frame), or "" when the location names no file."""
  try:
    text = str(op.location)
  except Exception:
    return ""
  found = _FILE_LINE.findall(text)
  if not found:
    return ""
  for path, line in found:
    if not any(part in path for part in _NOT_USER):
      return f"{path}:{line}"
  path, line = found[0]
  return f"{path}:{line}"


def as_dict(ir, attribute):
  """`attribute` as a DictAttr, or None when it is not one."""
  try:
    return ir.DictAttr(attribute)
  except (ValueError, TypeError):
    return None


def typed_ffi_config(ir, attributes) -> str | None:
  """The attribute that holds a typed FFI call's attributes (JAX writes
  ``mhlo.backend_config`` with ``api_version = 1``; StableHLO's own form is
  ``backend_config`` with ``api_version = 4``), or None for an untyped
  custom call."""
  if (
    "mhlo.backend_config" in attributes
    and as_dict(ir, attributes["mhlo.backend_config"]) is not None
  ):
    return "mhlo.backend_config"
  if (
    "api_version" in attributes
    and ir.IntegerAttr(attributes["api_version"]).value == TYPED_FFI
  ) and (
    "backend_config" not in attributes
    or as_dict(ir, attributes["backend_config"]) is not None
  ):
    return "backend_config"
  return None
