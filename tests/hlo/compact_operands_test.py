"""Tuple elements written as operands (``%t#k``, ``%t#k#j``), as XLA's dumps
write them from jaxlib 0.11 on: read as the get-tuple-elements they stand
for, with the same answers as the explicit text, and any operand syntax
the parser does not know refused."""

import io
import json
import pathlib
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing._ways_in import command
from tests import test_util

DATA = pathlib.Path(__file__).parent / "data" / "compact"
ELEMENT = re.compile(r"%[\w.\-]+#\d")
"""A compact tuple element used as an operand."""
COMPACT_JAX = (0, 11)
"""The first jaxlib whose dumps write compact tuple elements."""

EXPLICIT = """\
HloModule m, is_scheduled=true

%body (b: (s32[], (s32[], f32[]))) -> (s32[], (s32[], f32[])) {
  %b = (s32[], (s32[], f32[])) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %inner = (s32[], f32[]) get-tuple-element(%b), index=1
  %token = s32[] get-tuple-element(%inner), index=0
  %w = s32[] custom-call(%token), custom_call_target="W", custom_call_has_side_effect=true
  %v = f32[] get-tuple-element(%inner), index=1
  %pair = (s32[], f32[]) tuple(%w, %v)
  ROOT %out = (s32[], (s32[], f32[])) tuple(%i, %pair)
}

%cond (c: (s32[], (s32[], f32[]))) -> pred[] {
  %c = (s32[], (s32[], f32[])) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %k = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %k), direction=LT
}

ENTRY %main (a: s32[], x: f32[]) -> f32[] {
  %a = s32[] parameter(0)
  %x = f32[] parameter(1)
  %pair0 = (s32[], f32[]) tuple(%a, %x)
  %tup = (s32[], (s32[], f32[])) tuple(%a, %pair0)
  %loop = (s32[], (s32[], f32[])) while(%tup), condition=%cond, body=%body
  %after = (s32[], f32[]) get-tuple-element(%loop), index=1
  %t = s32[] get-tuple-element(%after), index=0
  %r = f32[] custom-call(%t), custom_call_target="R"
  %early = f32[] custom-call(%a), custom_call_target="R2"
  ROOT %sum = f32[] add(%r, %early)
}
"""

# The same module as jaxlib 0.11's dumps write it: no get-tuple-element
# but the ROOT's kind, each element named where it is used.
COMPACT = """\
HloModule m, is_scheduled=true

%body (b: (s32[], (s32[], f32[]))) -> (s32[], (s32[], f32[])) {
  %b = (s32[], (s32[], f32[])) parameter(0)
  %w = s32[] custom-call(%b#1#0), custom_call_target="W", custom_call_has_side_effect=true
  %pair = (s32[], f32[]) tuple(%w, %b#1#1)
  ROOT %out = (s32[], (s32[], f32[])) tuple(%b#0, %pair)
}

%cond (c: (s32[], (s32[], f32[]))) -> pred[] {
  %c = (s32[], (s32[], f32[])) parameter(0)
  %k = s32[] constant(3)
  ROOT %lt = pred[] compare(%c#0, %k), direction=LT
}

ENTRY %main (a: s32[], x: f32[]) -> f32[] {
  %a = s32[] parameter(0)
  %x = f32[] parameter(1)
  %pair0 = (s32[], f32[]) tuple(%a, %x)
  %tup = (s32[], (s32[], f32[])) tuple(%a, %pair0)
  %loop = (s32[], (s32[], f32[])) while(%tup), condition=%cond, body=%body
  %r = f32[] custom-call(%loop#1#0), custom_call_target="R"
  %early = f32[] custom-call(%a), custom_call_target="R2"
  ROOT %sum = f32[] add(%r, %early)
}
"""


def order(text: str) -> dict:
  """Which effectful op precedes which, by name, in the module `text`."""
  analysis = testing.OrderAnalysis(text)
  ops = analysis.effectful_ops()
  return {
    (a.instruction.name, b.instruction.name): analysis.precedes(a, b)
    for a in ops
    for b in ops
    if a is not b
  }


def findings(path: pathlib.Path) -> dict:
  """The command's JSON findings for one module file, without its path."""
  out = io.StringIO()
  status = command.main(["--format", "json", str(path)], out=out)
  answer = json.loads(out.getvalue())
  del answer["declarations"]
  for module in answer["modules"]:
    del module["path"]
  return {"status": status, **answer}


def pairs(text: str) -> list[tuple[str, str]]:
  return sorted(
    (r.first.instruction.name, r.second.instruction.name)
    for r in testing.races(text)
  )


class HandWrittenTest(absltest.TestCase):
  def test_compact_reads_as_the_explicit_module(self):
    self.assertEqual(order(COMPACT), order(EXPLICIT))
    self.assertEqual(pairs(COMPACT), pairs(EXPLICIT))
    # What the comparison rests on: the loop's write precedes the read of
    # its result through the nested element %loop#1#0 (so they are no
    # pair), and both race with the undeclared call made before the loop,
    # which nothing orders.
    self.assertTrue(order(COMPACT)[("w", "r")])
    self.assertEqual(pairs(COMPACT), [("r", "early"), ("w", "early")])

  def test_the_element_taken_matters(self):
    # Control: the read after the loop takes element 1 of the inner pair
    # (the float), which the write did not make, so the write no longer
    # precedes it. Read as the whole tuple, as the parser once did, it
    # would.
    other = COMPACT.replace("custom-call(%loop#1#0)", "custom-call(%loop#1#1)")
    self.assertFalse(order(other)[("w", "r")])

  def test_elements_become_get_tuple_elements(self):
    module = testing._hlo.parse(COMPACT)
    body = {i.name: i for i in module.computations["body"]}
    element = body["b#1#0"]
    self.assertEqual(element.opcode, "get-tuple-element")
    self.assertEqual(element.operands, ("b#1",))
    self.assertEqual(element.tuple_index, 0)
    self.assertEqual(element.shape, "s32[]")
    self.assertEqual(body["b#1"].shape, "(s32[], f32[])")
    # Each once, before its first user.
    names = [i.name for i in module.computations["body"]]
    self.assertEqual(names.count("b#1"), 1)
    self.assertLess(names.index("b#1"), names.index("b#1#0"))
    self.assertLess(names.index("b#1#0"), names.index("w"))


class RefusedTest(absltest.TestCase):
  def refused(self, text: str, why: str) -> None:
    with self.assertRaisesRegex(ValueError, why):
      testing.OrderAnalysis(text)

  def test_an_element_the_tuple_lacks(self):
    self.refused(
      COMPACT.replace("%loop#1#0", "%loop#1#2"),
      r"line \d+: operand %loop#1#2 takes element 2 of %loop#1, whose "
      r"result \(s32\[\], f32\[\]\) has 2 element",
    )

  def test_an_element_of_an_array(self):
    self.refused(
      COMPACT.replace("custom-call(%a)", "custom-call(%a#0)"),
      r"operand %a#0 takes element 0 of %a, whose result s32\[\] is not a "
      "tuple",
    )

  def test_an_element_of_nothing(self):
    self.refused(
      COMPACT.replace("%loop#1#0", "%nowhere#1"),
      "operand %nowhere#1 is element 1 of %nowhere, which is not defined",
    )

  def test_operand_syntax_it_does_not_know(self):
    for bad, quoted in [
      ("%loop#x", "'#x'"),
      ("%loop#1:0", "':0'"),
      ("%loop#1 #0", "'#0'"),
      ("%loop#1 %a", "''"),
    ]:
      with self.subTest(bad):
        self.refused(
          COMPACT.replace("%loop#1#0", bad),
          f"cannot read the operands at {quoted}.*custom-call",
        )
    # Control: shapes before operands, as older XLA writes them, are read.
    self.assertEqual(
      pairs(COMPACT.replace("(%loop#1#0)", "(s32[] %loop#1#0)")),
      pairs(COMPACT),
    )


def stored() -> list[str]:
  return sorted(p.name for p in (DATA / "compact").glob("*.txt"))


class StoredDumpsTest(absltest.TestCase):
  """Dumps of tests/hlo/compact_programs.py from jax 0.12.0.1 on CPU, with
  compact elements and without (data/compact/README.md): checked on every
  jax this suite runs on."""

  def test_same_findings_from_both_forms(self):
    self.assertLen(stored(), 6)
    racing = {}
    with_elements = 0
    for name in stored():
      with self.subTest(name):
        compact = (DATA / "compact" / name).read_text()
        explicit = (DATA / "explicit" / name).read_text()
        # The comparison means something: one form writes elements as
        # operands, the other as instructions (XLA:CPU leaves the barrier
        # module no tuple at all).
        with_elements += bool(ELEMENT.search(compact))
        self.assertNotRegex(explicit, ELEMENT)
        self.assertEqual(
          findings(DATA / "compact" / name),
          findings(DATA / "explicit" / name),
        )
        self.assertEqual(order(compact), order(explicit))
        racing[name.rsplit(".", 2)[0]] = len(testing.races(compact))
    self.assertEqual(with_elements, 5)
    # The loop, the barrier and the branch race; the loop under
    # in_program_order (module_0006) and both scans do not.
    self.assertEqual(
      racing,
      {
        "module_0004.jit_loop": 1,
        "module_0006.jit_loop": 0,
        "module_0008.jit_scan_entangled": 0,
        "module_0010.jit_scan_resource": 0,
        "module_0012.jit_barrier": 1,
        "module_0014.jit_branch": 1,
      },
    )


def dump(root: pathlib.Path, compact: bool) -> pathlib.Path:
  """Runs compact_programs.py with XLA dumping its modules (compact
  elements or explicit); returns the dump."""
  out = root / ("compact" if compact else "explicit")
  flags = f"--xla_dump_to={out} --xla_dump_hlo_as_text"
  if not compact:
    flags += " --xla_dump_compact_gte=false"
  result = subprocess.run(
    [sys.executable, "-m", "tests.hlo.compact_programs"],
    capture_output=True,
    text=True,
    timeout=180,
    env=dict(test_util.child_env(), XLA_FLAGS=flags),
    cwd=pathlib.Path(__file__).parents[2],
  )
  if result.returncode:
    raise AssertionError(result.stderr[-3000:])
  return out


@absltest.skipIf(
  test_util.jax_version() < COMPACT_JAX,
  f"jaxlib {'.'.join(map(str, COMPACT_JAX))} and newer dump compact tuple "
  "elements (CI's newest-jax lane runs this)",
)
class LiveDumpsTest(absltest.TestCase):
  """This jax's own dumps of the programs, both ways."""

  def test_same_findings_from_both_forms(self):
    root = pathlib.Path(tempfile.mkdtemp())
    compact, explicit = dump(root, True), dump(root, False)
    names = sorted(p.name for p in compact.glob("*after_optimizations.txt"))
    self.assertEqual(
      names, sorted(p.name for p in explicit.glob("*after_optimizations.txt"))
    )
    with_elements = 0
    for name in names:
      with self.subTest(name):
        text = (compact / name).read_text()
        with_elements += bool(ELEMENT.search(text))
        self.assertEqual(findings(compact / name), findings(explicit / name))
        if "custom-call" in text:
          self.assertEqual(order(text), order((explicit / name).read_text()))
    self.assertGreaterEqual(with_elements, 5)
    out = io.StringIO()
    self.assertEqual(command.main([str(compact)], out=out), 1)
    # The branch's read and the write after the cond: the write takes
    # only the branch's token, which no value of the read reaches. So
    # does the loop's last read and the write after the loop: that read
    # reaches only the total, no write (the loop's state, met over its
    # iterations).
    self.assertIn("3 with races, 5 pairs", out.getvalue())


if __name__ == "__main__":
  absltest.main()
