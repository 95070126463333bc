"""tools/thunk_dump.py: which custom calls XLA:GPU put into a command
buffer, read from its thunk dump (what tools/gpu_check.py checks on a GPU
machine, where the HLO shows no command buffer).

No GPU here: the thunk dumps below are HAND-MADE SAMPLES of the format,
written for this test after XLA's printers (openxla/xla:
`SequentialThunk::ToString` writes ``<indent><id, 3 digits>: <kind padded>\\t``
and the thunk's own text, `CommandBufferThunk::ToString` a newline and its
thunks one level deeper; the metadata is `ThunkMetadataListProto` in text
format, from `GetMetadataListProtoFromThunkGraph`). They are not copies of a
real dump. The HLO is real: the entangle program XLA:GPU compiled on an H200
(tests/ways_in/data/h200)."""

import pathlib

from absl.testing import absltest

from entangle_jax._src.targets.names import ENTANGLE_TARGET
from tests import test_util

thunk_dump = test_util.development_tool("thunk_dump")

H200 = pathlib.Path(__file__).resolve().parents[1] / "ways_in" / "data" / "h200"

# HAND-MADE SAMPLE: sin, entangle and cos in one command buffer, as with
# --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL.
INSIDE = (
  "001: kCommandBuffer\t\n"
  "    002: kKernel    \t\n"
  "    003: kCustomCall\t\n"
  "    004: kKernel    \t\n"
  "\n"
)
# HAND-MADE SAMPLE: the same module with custom calls kept out of command
# buffers: the buffer is split at the call.
SPLIT = (
  "001: kCommandBuffer\t\n"
  "    002: kKernel\t\n"
  "\n"
  "003: kCustomCall   \t\n"
  "005: kCommandBuffer\t\n"
  "    004: kKernel\t\n"
  "\n"
)
# HAND-MADE SAMPLE of the metadata (every thunk, nested ones too).
METADATA = """\
thunk_metadata {
  thunk_info {
    profile_annotation: "command_buffer"
    thunk_id: 1
  }
  thunk_kind: "kCommandBuffer"
}
thunk_metadata {
  thunk_info {
    profile_annotation: "loop_sine_fusion"
    thunk_id: 2
  }
  thunk_kind: "kKernel"
}
thunk_metadata {
  thunk_info {
    profile_annotation: "entangle.1"
    thunk_id: 3
  }
  thunk_kind: "kCustomCall"
}
thunk_metadata {
  thunk_info {
    profile_annotation: "loop_cosine_fusion"
    execution_stream_id: 0
    thunk_id: 4
  }
  thunk_kind: "kKernel"
}
thunk_metadata {
  thunk_info { profile_annotation: "command_buffer" thunk_id: 5 }
  thunk_kind: "kCommandBuffer"
}
"""


class ThunkDumpTest(absltest.TestCase):
  def test_lines_and_nesting(self):
    ((buffer, nested),) = thunk_dump.command_buffers(INSIDE)
    self.assertEqual((buffer.thunk_id, buffer.kind), (1, "kCommandBuffer"))
    self.assertEqual(
      [(t.thunk_id, t.kind) for t in nested],
      [(2, "kKernel"), (3, "kCustomCall"), (4, "kKernel")],
    )
    buffers = thunk_dump.command_buffers(SPLIT)
    self.assertEqual([[t.thunk_id for t in n] for _, n in buffers], [[2], [4]])

  def test_metadata(self):
    found = thunk_dump.metadata(METADATA)
    self.assertEqual(found[3], ("kCustomCall", "entangle.1"))
    self.assertEqual(found[5], ("kCommandBuffer", "command_buffer"))
    self.assertLen(found, 5)

  def test_metadata_that_is_not_a_proto_is_refused(self):
    with self.assertRaisesRegex(ValueError, "never closes"):
      thunk_dump.metadata("thunk_metadata { thunk_info { thunk_id: 1 }")
    twice = "thunk_metadata { thunk_kind: 'a' }\n" * 2
    with self.assertRaisesRegex(ValueError, "thunk id 0 twice"):
      thunk_dump.metadata(twice)

  def test_the_entangle_calls_of_a_real_gpu_module(self):
    hlo = (H200 / "text_ENTANGLE.txt").read_text()
    self.assertEqual(thunk_dump.calls_to(hlo, ENTANGLE_TARGET), ["entangle.1"])
    self.assertLen(thunk_dump.calls_to(hlo, "entangle_jax_write_slot"), 2)
    # Control: the unordered program has no entangle call.
    none = (H200 / "text_NONE.txt").read_text()
    self.assertEqual(thunk_dump.calls_to(none, ENTANGLE_TARGET), [])

  def test_a_call_inside_a_command_buffer(self):
    placed = thunk_dump.place(INSIDE, METADATA, ["entangle.1"])
    self.assertEqual(placed.inside, {"entangle.1": 1})
    self.assertTrue(placed.all_inside)
    self.assertEqual(placed.command_buffers, 1)

  def test_a_call_between_command_buffers(self):
    # Control: the same call, the buffer split at it, is found outside.
    placed = thunk_dump.place(SPLIT, METADATA, ["entangle.1"])
    self.assertEqual(placed.outside, ["entangle.1"])
    self.assertIs(placed.all_inside, False)
    self.assertEqual(placed.command_buffers, 2)

  def test_a_dump_that_does_not_say(self):
    # No metadata and no names on the lines: the dump does not place the
    # call, and says so rather than "outside".
    placed = thunk_dump.place(INSIDE, None, ["entangle.1"])
    self.assertEqual(placed.unknown, ["entangle.1"])
    self.assertIsNone(placed.all_inside)
    # Nor does a dump with no thunk for it.
    self.assertIsNone(
      thunk_dump.place(INSIDE, METADATA, ["other.2"]).all_inside
    )

  def test_a_name_on_the_line_places_the_call(self):
    # HAND-MADE SAMPLE: a dump that writes each thunk's instruction on its
    # line, and no ids.
    named = (
      "kCommandBuffer\t\n"
      "  kKernel\tloop_sine_fusion\n"
      "  kCustomCall\tentangle.1\n"
      "kCustomCall\tentangle.12\n"
    )
    placed = thunk_dump.place(named, None, ["entangle.1", "entangle.12"])
    self.assertEqual(placed.inside, {"entangle.1": -1})
    self.assertEqual(placed.outside, ["entangle.12"])  # Not entangle.1's.


if __name__ == "__main__":
  absltest.main()
