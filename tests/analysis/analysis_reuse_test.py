"""What the analysis reads or computes once and reuses, for speed on large
modules: each answer must be what it would be without the reuse.

* The attributes after an instruction's operands are read once per distinct
  text and opcode (`_hlo_instruction.InstructionReader`).
* Instructions are built without the frozen dataclass's ``__init__``.
* A ``Compiled``'s text is printed once (`_hlo.module_text`).
* Analyses of one text share the order among its ops, but each op's
  accesses are its own analysis's (`_order.OpOrder.races`).
"""

import dataclasses
from unittest import mock

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing import _hlo

# Every line ends in the same metadata; %x and %g also share `, index=1`
# (an attribute that only a get-tuple-element reads).
M = 'metadata={op_name="a"}'
SHARED_TEXT = f"""\
HloModule m, is_scheduled=true

ENTRY %main (p: s32[]) -> s32[] {{
  %p = s32[] parameter(0), {M}
  %x = s32[] negate(%p), index=1, {M}
  %w = s32[] custom-call(%x), custom_call_target="W", {M}
  %t = (s32[], s32[]) tuple(%p, %w), {M}
  %g = s32[] get-tuple-element(%t), index=1, {M}
  ROOT %r = s32[] custom-call(%g), custom_call_target="W", {M}
}}
"""


def instructions(text: str) -> dict[str, _hlo.Instruction]:
  return {i.name: i for i in _hlo.parse(text).computations["main"]}


class InstructionReaderTest(absltest.TestCase):
  def test_lines_that_share_attribute_text_keep_their_own_fields(self):
    found = instructions(SHARED_TEXT)
    self.assertEqual(list(found), ["p", "x", "w", "t", "g", "r"])
    self.assertEqual(
      [(i.opcode, i.operands) for i in found.values()],
      [
        ("parameter", ()),
        ("negate", ("p",)),
        ("custom-call", ("x",)),
        ("tuple", ("p", "w")),
        ("get-tuple-element", ("t",)),
        ("custom-call", ("g",)),
      ],
    )
    self.assertEqual({i.op_name for i in found.values()}, {"a"})
    self.assertEqual([found["w"].line, found["r"].line], [6, 9])
    self.assertTrue(found["r"].root)
    self.assertFalse(found["w"].root)
    # The same `, index=1` text: an index only for the get-tuple-element.
    self.assertEqual(
      (found["x"].tuple_index, found["g"].tuple_index), (None, 1)
    )
    analysis = testing.OrderAnalysis(SHARED_TEXT)
    w, r = analysis.select_ops("W")
    self.assertEqual((w.name, r.name), ("w", "r"))
    self.assertTrue(analysis.precedes(w, r))  # Through the tuple's element 1.

  def test_a_missing_index_is_refused_on_every_line_that_lacks_it(self):
    text = SHARED_TEXT.replace(
      f'%r = s32[] custom-call(%g), custom_call_target="W", {M}',
      f"%h = s32[] get-tuple-element(%t), {M}\n"
      f'  ROOT %r = s32[] custom-call(%h), custom_call_target="W", {M}',
    )
    # Control: the shared text itself is read without complaint.
    self.assertLen(instructions(SHARED_TEXT), 6)
    with self.assertRaisesRegex(
      ValueError, "line 9: a get-tuple-element needs"
    ):
      _hlo.parse(text)

  def test_instructions_equal_those_the_dataclass_builds(self):
    fields = {f.name for f in dataclasses.fields(_hlo.Instruction)}
    for name, i in instructions(SHARED_TEXT).items():
      with self.subTest(name):
        self.assertEqual(set(vars(i)), fields)
        built = dataclasses.replace(i)  # Through the generated __init__.
        self.assertEqual(built, i)
        self.assertEqual(hash(built), hash(i))
        with self.assertRaises(dataclasses.FrozenInstanceError):
          i.name = "changed"  # ty: ignore[invalid-assignment]


class CompiledTextTest(absltest.TestCase):
  def test_a_compiled_module_is_printed_once(self):
    compiled = jax.jit(testing.read_slot).lower(jnp.int32(0)).compile()
    with mock.patch.object(
      compiled, "as_text", wraps=compiled.as_text
    ) as as_text:
      self.assertEqual(testing.races(compiled), [])
      graph = testing.order_graph(compiled)
      text = testing.module_text(compiled)
    self.assertEqual(as_text.call_count, 1)
    self.assertEqual(text, compiled.as_text())
    self.assertIn("entangle_jax_read_slot", graph)
    # Control: another Compiled of the same program is printed for itself.
    other = jax.jit(testing.read_slot).lower(jnp.int32(0)).compile()
    with mock.patch.object(other, "as_text", wraps=other.as_text) as as_text:
      testing.module_text(other)
    self.assertEqual(as_text.call_count, 1)


if __name__ == "__main__":
  absltest.main()
