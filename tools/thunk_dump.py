"""Which custom calls XLA:GPU recorded into a command buffer (CUDA graph),
read from its thunk dump. Plain text in, no JAX: tools/gpu_check.py runs
it on a GPU machine, tests/repository/thunk_dump_test.py on samples.

XLA:GPU forms command buffers over the thunk sequence
(``CommandBufferConversionPass``), not as HLO computations, so the HLO
module does not show them. With ``--xla_dump_to=DIR
--xla_dump_hlo_as_text`` it writes, per module:

* ``*.thunk_sequence_after_thunk_passes.txt`` (only when the passes
  changed the thunks; else ``*.thunk_sequence.txt`` alone): one line a
  thunk, ``<indent><id>: <kind><padding>\\t<details>``; the thunks a
  ``kCommandBuffer`` holds follow it on lines indented deeper.
* ``*.thunk_metadata.txt``: a text proto with, for every thunk (nested
  ones too), its ``thunk_id``, its ``profile_annotation`` (the name of
  the HLO instruction it runs) and its ``thunk_kind``.

A call is in a command buffer when a thunk nested under a
``kCommandBuffer`` line runs it: its id's annotation names the call's
instruction, or its line does (where XLA writes more on the line).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

COMMAND_BUFFER = "kCommandBuffer"

_THUNK_LINE = re.compile(
  r"^(?P<indent>[ ]*)(?:(?P<id>\d+):\s+)?(?P<kind>k[A-Z]\w*)(?P<rest>.*)$"
)
# A text-format proto's tokens: a message opens (``name {``), closes, or a
# field has a value (a quoted string or a bare word).
_PROTO_TOKEN = re.compile(
  r"(?P<open>\w+)\s*:?\s*\{"
  r"|(?P<close>\})"
  r'|(?P<field>\w+)\s*:\s*(?P<value>"(?:[^"\\]|\\.)*"|[^\s{}]+)'
)
_CUSTOM_CALL = re.compile(
  r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=.*\bcustom-call\(.*"
  r'custom_call_target="(?P<target>[^"]*)"',
  re.MULTILINE,
)


@dataclasses.dataclass(frozen=True)
class Thunk:
  """One line of a thunk sequence dump."""

  indent: int
  thunk_id: int | None
  """None where the dump writes no ids."""
  kind: str
  text: str
  """The rest of the line, after the kind."""


def thunks(sequence: str) -> list[Thunk]:
  """The thunk lines of a ``thunk_sequence*.txt`` dump, in order (lines
  that name no thunk, as a while thunk's ``body:`` header, left out)."""
  found = []
  for line in sequence.splitlines():
    match = _THUNK_LINE.match(line.expandtabs(8).rstrip())
    if match:
      found.append(
        Thunk(
          len(match["indent"]),
          int(match["id"]) if match["id"] is not None else None,
          match["kind"],
          match["rest"].strip(),
        )
      )
  return found


def command_buffers(
  sequence: str,
) -> list[tuple[Thunk, list[Thunk]]]:
  """Each ``kCommandBuffer`` thunk of the dump with the thunks nested in
  it: the lines after it indented deeper, up to the next line that is not
  (a command buffer inside another is listed on its own too)."""
  return _nested(thunks(sequence))


def _nested(lines: list[Thunk]) -> list[tuple[Thunk, list[Thunk]]]:
  found = []
  for k, thunk in enumerate(lines):
    if thunk.kind != COMMAND_BUFFER:
      continue
    inside = []
    for later in lines[k + 1 :]:
      if later.indent <= thunk.indent:
        break
      inside.append(later)
    found.append((thunk, inside))
  return found


def metadata(text: str) -> dict[int, tuple[str, str]]:
  """``thunk_id -> (thunk_kind, profile_annotation)`` from a
  ``thunk_metadata.txt`` dump (a ``ThunkMetadataListProto`` in text
  format; a field at its default, as thunk id 0, is not written).

  Raises:
    ValueError: the text is not such a proto, or two thunks share an id.
  """
  found: dict[int, tuple[str, str]] = {}
  stack: list[str] = []
  fields: dict[str, str] = {}
  for token in _PROTO_TOKEN.finditer(text):
    if token["open"]:
      stack.append(token["open"])
      if stack == ["thunk_metadata"]:
        fields = {}
    elif token["close"]:
      if not stack:
        raise ValueError("thunk metadata: a '}' closes nothing")
      if stack.pop() == "thunk_metadata" and not stack:
        thunk_id = int(fields.get("thunk_id", "0"))
        if thunk_id in found:
          raise ValueError(f"thunk metadata: thunk id {thunk_id} twice")
        found[thunk_id] = (
          fields.get("thunk_kind", ""),
          fields.get("profile_annotation", ""),
        )
    elif stack and stack[0] == "thunk_metadata":
      value = token["value"]
      if value.startswith('"'):
        value = value[1:-1].encode().decode("unicode_escape")
      fields[token["field"]] = value
  if stack:
    raise ValueError(f"thunk metadata: {stack[-1]} {{ never closes")
  return found


def calls_to(hlo: str, target: str) -> list[str]:
  """The names of the custom calls to `target` in HLO module text (the
  names thunks carry as their profile annotation)."""
  return [
    m["name"].lstrip("%")
    for m in _CUSTOM_CALL.finditer(hlo)
    if m["target"] == target
  ]


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where the thunk dump puts some calls."""

  command_buffers: int
  """``kCommandBuffer`` thunks in the dump."""
  inside: dict[str, int]
  """Each call found in a command buffer: the command buffer's thunk id
  (-1 where the dump writes no ids)."""
  outside: list[str]
  """Calls whose thunk the dump shows outside every command buffer."""
  unknown: list[str]
  """Calls the dump does not place (no thunk names them)."""

  @property
  def all_inside(self) -> bool | None:
    """True when every call is in a command buffer, False when one is
    shown outside them, None when the dump does not say (or no call)."""
    if self.outside:
      return False
    if self.unknown or not self.inside:
      return None
    return True


def place(
  sequence: str, metadata_text: str | None, calls: Iterable[str]
) -> Placement:
  """Which of the instructions `calls` run inside a command buffer, from
  a thunk sequence dump and, when there is one, the module's thunk
  metadata dump."""
  calls = list(calls)
  names = {
    thunk_id: annotation
    for thunk_id, (_, annotation) in metadata(metadata_text or "").items()
  }

  def runs(thunk: Thunk, call: str) -> bool:
    if thunk.thunk_id is not None and names.get(thunk.thunk_id) == call:
      return True
    # The instruction's name on the line, not a longer name that holds it.
    found = re.search(rf"(?<![\w.%-]){re.escape(call)}(?![\w.-])", thunk.text)
    return found is not None

  lines = thunks(sequence)
  buffers = _nested(lines)
  inside: dict[str, int] = {}
  for buffer, nested in buffers:
    for call in calls:
      if call not in inside and any(runs(t, call) for t in nested):
        inside[call] = -1 if buffer.thunk_id is None else buffer.thunk_id
  in_buffers = {id(t) for _, nested in buffers for t in nested}
  outside, unknown = [], []
  for call in calls:
    if call in inside:
      continue
    shown = any(runs(t, call) for t in lines if id(t) not in in_buffers)
    (outside if shown else unknown).append(call)
  return Placement(len(buffers), inside, outside, unknown)
