"""The ``key=value`` attributes that follow an instruction's operands, read
into `entangle_jax.testing._hlo.instruction.Instruction` fields.

Quoted strings (``op_name``, targets, backend configs) are masked before any
attribute is looked up, so no scope name can pose as an attribute. Reading
is linear in the text's length; attributes this module does not know are
skipped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# A quoted string, escapes included; written as runs of plain characters
# between escapes, which the regex engine matches about twice as fast as an
# alternation tried at every character.
_QUOTED = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"', re.DOTALL)
_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}
# One ``key=value`` attribute: a masked string, a brace group (with one
# level of nesting, as in output_to_operand_aliasing={{0}: (1, {})}) or a
# bare word.
_ATTRIBUTE = re.compile(
  r'(?:^|,)\s*([\w\-]+)=("\d+"|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|[^,\s{}]+)'
)
_METADATA_FIELD = re.compile(r'(\w+)=("\d+"|[^\s"{}]+)')
_NAME_LIST = re.compile(r"%?([\w.\-]+)")
_INDEX = re.compile(r"\s*,\s*index=(\d+)")
_ALIASED_OPERAND = re.compile(r"\(\s*(\d+)\s*,")
_SLICE = re.compile(r"slice=\{([^}]*)\}")
_SLICE_START = re.compile(r"\[\s*(\d+)\s*:")
# One dimension of a slice: ``[start:limit]`` or ``[start:limit:stride]``.
_SLICE_RANGE = re.compile(r"\[\s*(\d+)\s*:\s*(\d+)\s*(?::\s*(\d+)\s*)?\]")
_DIMENSIONS = re.compile(
  r"(?<![\w])(?:dimensions|iota_dimension)=\{?([\d,\s]*)\}?"
)
# The key that pairs a host transfer with its peer on the host (JAX writes
# it as a frontend attribute of each send, recv and their dones).
_RENDEZVOUS = re.compile(r'_xla_host_transfer_rendezvous="([^"]*)"')
_HOST_TRANSFER_OPCODES = frozenset({"send", "send-done", "recv", "recv-done"})
# Attributes that name called computations: a loop's condition first.
_CALLEE_KEYS = (
  "condition",
  "body",
  "calls",
  "to_apply",
  "true_computation",
  "false_computation",
  "branch_computations",
  "called_computations",
)

Stack = tuple[tuple[str, int], ...]


def unescape(text: str) -> str:
  """Decodes an HLO string literal's escapes (octal bytes, ``\\"``...)."""
  if "\\" not in text:
    return text

  def one(match: re.Match) -> bytes:
    octal, hexa, char = match.groups()
    if octal is not None:
      return bytes([int(octal, 8) & 0xFF])
    if hexa is not None:
      return bytes([int(hexa, 16)])
    return _SIMPLE_ESCAPES.get(char, char)

  raw = _ESCAPE.sub(one, text.encode("utf-8"))
  return raw.decode("utf-8", errors="replace")


def mask_strings(text: str) -> tuple[str, list[str]]:
  """`text` with each quoted string replaced by ``"<its index>"``."""
  if '"' not in text:
    return text, []
  strings: list[str] = []

  def keep(match: re.Match) -> str:
    strings.append(match.group(1))
    return f'"{len(strings) - 1}"'

  return _QUOTED.sub(keep, text), strings


def attribute_fields(
  opcode: str, text: str, stack_of: Callable[[int], Stack]
) -> dict[str, object]:
  """The `Instruction` fields that the attributes `text` give, by name.

  Args:
    opcode: the instruction's opcode (a ``get-tuple-element``'s first
      attribute is its index; a ``conditional`` has branches).
    text: everything after the operands' closing parenthesis.
    stack_of: the Python stack of a ``stack_frame_id``.

  Fields the text does not give are absent (they keep their defaults); a
  ``get-tuple-element`` without ``index=N`` has no ``tuple_index``.
  """
  fields, place = _text_fields(opcode, text)
  if place is None:
    return dict(fields)
  frame, file_line = place
  stack = stack_of(frame) if frame is not None else ()
  if not stack and file_line is not None:
    stack = (file_line,)
  return {**fields, "stack": stack, "source": stack[0] if stack else None}


_Place = tuple[int | None, tuple[str, int] | None]
"""What metadata says of where an op was made: its ``stack_frame_id``,
and its ``source_file`` and ``source_line`` (the innermost frame)."""


@functools.lru_cache(maxsize=8192)
def _text_fields(
  opcode: str, text: str
) -> tuple[dict[str, object], _Place | None]:
  """`attribute_fields` less the Python stack, which is the module's
  (its frame tables'): the fields that `text` alone gives, and where its
  metadata, if any, says the op was made. Kept across modules (the
  modules a test suite checks repeat the same few attribute texts) and
  never changed by a caller (`attribute_fields` copies them)."""
  masked, strings = mask_strings(text)
  attributes = _Attributes(masked, strings)
  fields: dict[str, object] = {}
  if opcode == "get-tuple-element" and (index := _INDEX.match(masked)):
    fields["tuple_index"] = int(index.group(1))
  if attributes.has("control-predecessors"):
    fields["control_predecessors"] = attributes.names("control-predecessors")
  if attributes.has_any(_CALLEE_KEYS):
    fields["callees"] = attributes.callees()
    fields["body"] = attributes.callee("body")
    fields["condition"] = attributes.callee("condition")
    if opcode == "conditional":
      fields["branches"] = attributes.branches()
  if attributes.has("custom_call_target"):
    fields["target"] = attributes.string("custom_call_target")
    side_effect = attributes.word("custom_call_has_side_effect")
    fields["side_effect"] = side_effect == "true"
    fields["aliased_operands"] = attributes.aliased_operands()
  if opcode == "parameter" and attributes.has("sharding"):
    sharding = attributes.word("sharding") or ""
    fields["tiled"] = (
      "devices=" in sharding
      and "replicate" not in sharding
      and "maximal" not in sharding
    )
    fields["replicated"] = sharding.strip("{}").strip() == "replicated"
  if opcode == "compare":
    fields["direction"] = attributes.word("direction")
  if opcode == "slice" and (found := _SLICE.search(masked)):
    fields["slice_starts"] = tuple(
      int(start) for start in _SLICE_START.findall(found.group(1))
    )
    fields["slice_ranges"] = tuple(
      (int(start), int(limit), int(stride or 1))
      for start, limit, stride in _SLICE_RANGE.findall(found.group(1))
    )
  if opcode == "scatter":
    fields["scatter_dims"] = _index_dims(masked, _SCATTER_KEYS)
  if opcode == "gather":
    fields["gather_dims"] = _index_dims(masked, _GATHER_KEYS)
  if "dimension" in masked and (found := _DIMENSIONS.search(masked)):
    fields["dimensions"] = tuple(
      int(d) for d in found.group(1).split(",") if d.strip()
    )
  if opcode in _HOST_TRANSFER_OPCODES and (
    attributes.word("is_host_transfer") == "true"
  ):
    fields["host_transfer"] = True
    if found := _RENDEZVOUS.search(text):
      fields["rendezvous"] = found.group(1)
  if not attributes.has("metadata"):
    return fields, None
  metadata = attributes.metadata()
  fields["op_name"] = _unquote(metadata.get("op_name"), strings) or ""
  fields["op_type"] = _unquote(metadata.get("op_type"), strings) or ""
  frame = metadata.get("stack_frame_id", "")
  file = _unquote(metadata.get("source_file"), strings)
  line = metadata.get("source_line", "")
  return fields, (
    int(frame) if frame.isdigit() else None,
    (file, int(line)) if file is not None and line.isdigit() else None,
  )


def _index_dims(masked: str, keys: tuple[str, ...]) -> tuple | None:
  """The dimension lists `keys` of a scatter's or gather's attributes, in
  order, then its ``index_vector_dim``; None where one is missing."""
  found = []
  for key in keys:
    match = re.search(rf"\b{key}=\{{([\d,\s]*)\}}", masked)
    if match is None:
      return None
    found.append(tuple(int(d) for d in match.group(1).split(",") if d.strip()))
  vector = re.search(r"\bindex_vector_dim=(\d+)", masked)
  if vector is None:
    return None
  return (*found, int(vector.group(1)))


# A gather's dimension lists, then (`_index_dims`) its index_vector_dim.
_GATHER_KEYS = (
  "offset_dims",
  "collapsed_slice_dims",
  "start_index_map",
  "slice_sizes",
)

# A scatter's, likewise.
_SCATTER_KEYS = (
  "update_window_dims",
  "inserted_window_dims",
  "scatter_dims_to_operand_dims",
)


def _unquote(value: str | None, strings: list[str]) -> str | None:
  """The string a masked value ``"<index>"`` stands for; None otherwise."""
  if value is None or not value.startswith('"'):
    return None
  return unescape(strings[int(value[1:-1])])


class _Attributes:
  """Typed access to masked ``key=value`` attributes."""

  def __init__(self, masked: str, strings: list[str]):
    self._attributes = dict(_ATTRIBUTE.findall(masked))
    self._strings = strings

  def has(self, key: str) -> bool:
    return key in self._attributes

  def has_any(self, keys: tuple[str, ...]) -> bool:
    return not self._attributes.keys().isdisjoint(keys)

  def word(self, key: str) -> str | None:
    return self._attributes.get(key)

  def string(self, key: str) -> str | None:
    return _unquote(self._attributes.get(key), self._strings)

  def names(self, key: str) -> tuple[str, ...]:
    value = self._attributes.get(key)
    return tuple(_NAME_LIST.findall(value)) if value else ()

  def callee(self, key: str) -> str | None:
    value = self._attributes.get(key)
    return value.lstrip("%") if value else None

  def callees(self) -> tuple[str, ...]:
    keys = [key for key in _CALLEE_KEYS if key in self._attributes]
    found = [name for key in keys for name in self.names(key)]
    return tuple(dict.fromkeys(found))

  def branches(self) -> tuple[str, ...]:
    if "branch_computations" in self._attributes:
      return self.names("branch_computations")
    true, false = (
      self.callee("true_computation"),
      self.callee("false_computation"),
    )
    return (true, false) if true and false else ()

  def aliased_operands(self) -> tuple[int, ...]:
    value = self._attributes.get("output_to_operand_aliasing")
    if not value:
      return ()
    return tuple(sorted({int(n) for n in _ALIASED_OPERAND.findall(value)}))

  def metadata(self) -> dict[str, str]:
    return dict(_METADATA_FIELD.findall(self._attributes.get("metadata", "")))
