"""What the analysis reads: only XLA's optimized, scheduled module; malformed
text is refused naming its line; whitespace and deep nesting are fine."""

import textwrap

import jax
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from entangle_jax.testing import _hlo

GOOD = """\
HloModule m, is_scheduled=true

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %w = s32[] custom-call(%p), custom_call_target="W", custom_call_has_side_effect=true
  ROOT %r = s32[] custom-call(%w), custom_call_target="R"
}
"""

WHAT_TO_PASS = r"jax\.jit\(f\)\.lower\(\*args\)\.compile\(\)"


def nested_calls(depth: int) -> str:
  """A chain of `depth` computations, each calling the next; W is in the
  entry, X in the innermost one."""
  parts = [
    "HloModule deep, is_scheduled=true\n",
    "%c0 (p: s32[]) -> s32[] {\n  %p = s32[] parameter(0)\n"
    '  ROOT %x = s32[] custom-call(%p), custom_call_target="X"\n}\n',
  ]
  for k in range(1, depth):
    parts.append(
      f"%c{k} (p: s32[]) -> s32[] {{\n  %p = s32[] parameter(0)\n"
      f"  ROOT %c = s32[] call(%p), to_apply=%c{k - 1}\n}}\n"
    )
  parts.append(
    "ENTRY %main (p: s32[]) -> s32[] {\n  %p = s32[] parameter(0)\n"
    '  %w = s32[] custom-call(%p), custom_call_target="W", '
    "custom_call_has_side_effect=true\n"
    f"  ROOT %c = s32[] call(%w), to_apply=%c{depth - 1}\n}}\n"
  )
  return "\n".join(parts)


class ScheduledModuleTest(absltest.TestCase):
  def test_unoptimized_hlo_text_is_refused(self):
    lowered = jax.jit(_hazard.program(Ordering.OPTIMIZATION_BARRIER)).lower(
      *_hazard.arguments()
    )
    with self.assertRaisesRegex(
      ValueError, f"is_scheduled=true.*{WHAT_TO_PASS}"
    ):
      testing.races(lowered.as_text(dialect="hlo"))
    with self.assertRaisesRegex(ValueError, f"StableHLO.*{WHAT_TO_PASS}"):
      testing.races(lowered.as_text())
    # Control: the compiled module of the same program is read, and has the
    # race that the barrier leaves on CPU.
    self.assertLen(testing.races(lowered.compile()), 1)

  def test_hand_written_text_must_be_scheduled(self):
    with self.assertRaisesRegex(ValueError, "line 1 lacks is_scheduled=true"):
      testing.races(GOOD.replace(", is_scheduled=true", ""))
    with self.assertRaisesRegex(ValueError, "is not an HloModule line"):
      testing.races(GOOD.split("\n", 1)[1])
    self.assertEqual(testing.races(GOOD), [])  # Control.

  def test_a_string_that_looks_like_the_flag_does_not_count(self):
    text = GOOD.replace(", is_scheduled=true", ', x="is_scheduled=true"')
    with self.assertRaisesRegex(ValueError, "lacks is_scheduled=true"):
      testing.races(text)


class MalformedTextTest(absltest.TestCase):
  def check(self, broken: str, line: int, why: str):
    with self.assertRaisesRegex(ValueError, f"line {line}: {why}"):
      testing.OrderAnalysis(broken)

  def test_errors_name_the_line(self):
    self.check(
      GOOD.replace("custom-call(%w)", "custom-call(%w"), 6, "unbalanced"
    )
    self.check(
      GOOD.replace("(%w)", "(%nope)"), 6, "operand %nope is not defined"
    )
    self.check(
      GOOD.replace("parameter(0)", "parameter(x)"), 4, "expected parameter"
    )
    self.check(
      GOOD.replace("%p = s32[] parameter(0)", "garbage"), 4, "expected"
    )
    self.check(GOOD.replace("ENTRY %main", "ENTRY main oops"), 3, "expected")
    self.check(
      GOOD.replace(
        "ROOT %r = s32[] custom-call(%w)",
        "ROOT %r = s32[] call(%w), to_apply=%none",
      ),
      6,
      "no computation is named %none",
    )
    self.check(
      GOOD.replace("%w = s32[]", "%p = s32[]").replace("(%w)", "(%p)"),
      5,
      "%p defined twice",
    )

  def test_an_unclosed_computation(self):
    with self.assertRaisesRegex(
      ValueError, "line 6: computation %main is not closed"
    ):
      testing.races(GOOD.rstrip().rstrip("}"))

  def test_recursion_is_refused(self):
    text = GOOD.replace(
      "ENTRY %main",
      "%rec (q: s32[]) -> s32[] {\n  %q = s32[] parameter(0)\n"
      '  %x = s32[] custom-call(%q), custom_call_target="X"\n'
      "  ROOT %again = s32[] call(%x), to_apply=%rec\n}\n\nENTRY %main",
    ).replace(
      'ROOT %r = s32[] custom-call(%w), custom_call_target="R"',
      "ROOT %r = s32[] call(%w), to_apply=%rec",
    )
    with self.assertRaisesRegex(
      ValueError, "line 6: computation %rec calls itself"
    ):
      testing.races(text)

  def test_an_operand_cycle_is_refused(self):
    text = GOOD.replace(
      "%p = s32[] parameter(0)",
      "%p = s32[] parameter(0)\n"
      "  %a = s32[] add(%b, %p)\n"
      "  %b = s32[] add(%a, %p)",
    )
    with self.assertRaisesRegex(ValueError, "line 5: %a depends on itself"):
      testing.races(text)


class AcceptedTextTest(absltest.TestCase):
  def test_leading_whitespace(self):
    compiled = _hazard.compiled(Ordering.ENTANGLE)
    text = textwrap.indent(testing.module_text(compiled), "    ")
    self.assertTrue(testing.happens_before(text, "read", "second_write"))
    # Control: the same, unindented, gives the same answer.
    self.assertTrue(testing.happens_before(compiled, "read", "second_write"))

  def test_comment_lines(self):
    text = testing.module_text(_hazard.compiled(Ordering.NONE))
    lines = text.splitlines()
    # A comment after the header, between computations and inside one.
    for at in (1, len(lines) // 2, len(lines) - 2):
      with self.subTest(at):
        commented = [*lines[:at], "  // read { ROOT %x = }", *lines[at:]]
        self.assertFalse(
          testing.happens_before("\n".join(commented), "read", "second_write")
        )
    # Control: the same line, not a comment, is refused.
    broken = [*lines[:1], "  read { ROOT %x = }", *lines[1:]]
    with self.assertRaisesRegex(ValueError, "line 2"):
      testing.races("\n".join(broken))

  def test_deep_nesting_does_not_exhaust_the_stack(self):
    # Deeper than Python's default recursion limit (1000).
    text = nested_calls(1100)
    self.assertTrue(testing.happens_before(text, "W", "X"))
    self.assertEqual(testing.races(text), [])
    self.assertIn("X", testing.order_graph(text, format="mermaid"))

  def test_strings_cannot_pose_as_attributes(self):
    scope = 'x/custom_call_target=\\"B\\", calls=%main, index=3/y'
    text = GOOD.replace(
      'custom_call_target="R"',
      f'custom_call_target="R", metadata={{op_name="{scope}"}}',
    )
    (r,) = _hlo.parse(text).computations["main"][2:]
    self.assertEqual((r.target, r.callees), ("R", ()))
    self.assertEqual(
      r.op_name, 'x/custom_call_target="B", calls=%main, index=3/y'
    )

  def test_index_comments_in_operand_lists(self):
    # XLA writes /*index=5*/ before every fifth operand of long lists.
    operands = ", ".join(
      f"/*index={k}*/%w" if k % 5 == 0 and k else "%w" for k in range(7)
    )
    shape = ", ".join(["s32[]"] * 7)
    text = GOOD.replace(
      'ROOT %r = s32[] custom-call(%w), custom_call_target="R"',
      f"%t = ({shape}) tuple({operands})\n"
      "  %g = s32[] get-tuple-element(%t), index=5\n"
      '  ROOT %r = s32[] custom-call(%g), custom_call_target="R"',
    )
    self.assertTrue(testing.happens_before(text, "W", "R"))


if __name__ == "__main__":
  absltest.main()
