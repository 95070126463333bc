"""The findings are plain records, and every format is written from them:
stable object labels (the raw value only in JSON), stable cause codes,
SARIF 2.1.0 with ``ruleId`` and the user's region, one-line GitHub
annotations, and records that pickle without the HLO (what a pytest-xdist
worker sends)."""

import json
import pathlib
import pickle
import tempfile

from absl.testing import absltest

from entangle_jax._src.targets import sources
from entangle_jax.testing._emitters import formats, github, sarif
from entangle_jax.testing._emitters import text as text_emitter
from entangle_jax.testing._findings import causes
from entangle_jax.testing._findings.records import Run
from entangle_jax.testing._ways_in import module_files
from tests.hand_written_hlo import hlo_module
from tests.test_util import READ, WRITE

HANDLE = 94869858940672
"""A handle baked into a module as a constant: an address, new each run."""


def constant_handle_module(handle: int = HANDLE) -> str:
  """Two writes on one constant handle (the example store's targets,
  declared built in: object operand 0), unordered."""
  return hlo_module(
    f"%h = u64[] constant({handle})\n"
    f'%w1 = u64[] custom-call(%h), custom_call_target="{WRITE}", '
    "custom_call_has_side_effect=true\n"
    f'%w2 = u64[] custom-call(%h), custom_call_target="{WRITE}", '
    "custom_call_has_side_effect=true\n"
    f'%r = f32[] custom-call(%h), custom_call_target="{READ}"'
  )


def checked(text: str) -> Run:
  folder = pathlib.Path(tempfile.mkdtemp())
  path = folder / "module_0001.jit_f.cpu_after_optimizations.txt"
  path.write_text(text)
  return Run([module_files.check_module(path, sources.current())])


class LabelsTest(absltest.TestCase):
  def test_a_constant_handle_is_labelled_not_printed(self):
    run = checked(constant_handle_module())
    self.assertEqual(run.status, 1)
    report = formats.render("text", run)
    self.assertIn("writes handle #1 (a constant)", report)
    for name in ("text", "github", "sarif"):
      with self.subTest(format=name):
        self.assertNotIn(str(HANDLE), formats.render(name, run))
    # The raw value is JSON's alone, beside the label.
    found = json.loads(formats.render("json", run))
    (race, *_) = found["modules"][0]["races"]
    self.assertEqual(
      race["first"]["objects"],
      [{"label": "handle #1 (a constant)", "raw": f"constant {HANDLE}"}],
    )

  def test_reports_of_two_runs_are_the_same(self):
    # Control: the handle's value differs from run to run, the report not.
    one = formats.render("text", checked(constant_handle_module(HANDLE)))
    two = formats.render("text", checked(constant_handle_module(HANDLE + 16)))

    def lines(report):  # Less the module's header: its file's folder.
      return [line for line in report.splitlines() if not line.startswith("==")]

    self.assertEqual(lines(one), lines(two))
    self.assertNotEqual(
      json.loads(formats.render("json", checked(constant_handle_module())))[
        "modules"
      ][0]["races"][0]["first"]["objects"],
      json.loads(
        formats.render("json", checked(constant_handle_module(HANDLE + 16)))
      )["modules"][0]["races"][0]["first"]["objects"],
    )


class CodesTest(absltest.TestCase):
  def test_every_cause_has_its_own_code(self):
    codes = [kind.code for kind in causes.CAUSES]
    self.assertEqual(len(codes), len(set(codes)))
    self.assertTrue(all(c.startswith("EJ") and len(c) == 5 for c in codes))

  def test_the_page_lists_every_cause(self):
    from tools import rule_docs

    page = rule_docs.PAGES["causes"]
    if not page.is_file():
      self.skipTest("no docs/ beside tests/")
    self.assertEqual(
      rule_docs.block_text(page.read_text(), "causes"),
      causes.markdown(),
      f"run {rule_docs.COMMAND}",
    )

  def test_the_text_report_names_the_code(self):
    report = formats.render("text", checked(constant_handle_module()))
    self.assertIn("the same object, and nothing orders them [EJ002]:", report)


class SarifTest(absltest.TestCase):
  def test_a_sarif_log(self):
    run = checked(constant_handle_module())
    log = json.loads(formats.render("sarif", run))
    self.assertEqual(log["version"], "2.1.0")
    self.assertIn("sarif-2.1.0", log["$schema"])
    (only,) = log["runs"]
    rules = only["tool"]["driver"]["rules"]
    self.assertEqual([r["id"] for r in rules], [k.code for k in causes.CAUSES])
    self.assertNotEmpty(only["results"])
    for result in only["results"]:
      self.assertEqual(result["ruleId"], "EJ002")
      self.assertEqual(rules[result["ruleIndex"]]["id"], result["ruleId"])
      (location,) = result["locations"]
      physical = location["physicalLocation"]
      # No user line in a hand-written module: the module file, line 1.
      self.assertTrue(physical["artifactLocation"]["uri"].startswith("file:"))
      self.assertEqual(physical["region"]["startLine"], 1)
      self.assertIn("Fix:", result["message"]["text"])
    self.assertTrue(only["invocations"][0]["executionSuccessful"])

  def test_a_relative_path_is_under_the_source_root(self):
    self.assertEqual(
      sarif._uri("src/my file.py"),
      {"uri": "src/my%20file.py", "uriBaseId": sarif.SOURCE_ROOT},
    )
    self.assertEqual(sarif._uri("/abs/x.py"), {"uri": "file:///abs/x.py"})

  def test_a_module_not_checked_is_a_notification(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    bad = folder / "module_0002.jit_g.cpu_after_optimizations.txt"
    bad.write_text("HloModule g\n\nENTRY %main {\n}\n")
    run = Run([module_files.check_module(bad, sources.current())])
    self.assertEqual(run.status, 2)
    (only,) = sarif.as_sarif(run)["runs"]
    self.assertEqual(only["results"], [])
    invocation = only["invocations"][0]
    self.assertFalse(invocation["executionSuccessful"])
    (note,) = invocation["toolExecutionNotifications"]
    self.assertEqual(note["level"], "error")
    self.assertIn("jit_g", note["message"]["text"])


class GithubTest(absltest.TestCase):
  def test_an_annotation_is_one_line_with_the_first_step(self):
    run = checked(constant_handle_module())
    lines = list(github.annotations(run))
    self.assertNotEmpty(lines)
    entry = run.results[0].findings.groups[0].entries[0]
    self.assertGreater(len(entry.steps), 0)
    first = lines[0]
    self.assertTrue(first.startswith("::error title=entangle-jax race::EJ002"))
    self.assertIn(f"Fix: {entry.steps[0]}", first)
    # The full fix is the text report's.
    self.assertIn(entry.fix, text_emitter.render(run))
    self.assertLess(len(first), 700, first)


class PicklingTest(absltest.TestCase):
  def test_results_pickle_without_the_hlo_or_the_analysis(self):
    run = checked(constant_handle_module())
    data = pickle.dumps(run.results)
    for stage in ("_hlo", "_order", "_analysis"):
      self.assertNotIn(f"entangle_jax.testing.{stage}".encode(), data)
    again = pickle.loads(data)
    self.assertEqual(again, list(run.results))
    self.assertEqual(
      formats.render("text", Run(again)), formats.render("text", run)
    )

  def test_control_a_race_pickles_the_hlo(self):
    # The check above can fail: what the analysis returns holds the HLO.
    from entangle_jax.testing import OrderAnalysis

    (race, *_) = OrderAnalysis(constant_handle_module()).races()
    data = pickle.dumps(race)
    self.assertIn(b"entangle_jax.testing._hlo", data)


if __name__ == "__main__":
  absltest.main()
