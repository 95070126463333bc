"""Pairs that declared ``safe_pairs`` leave out are counted in every
report, by entry and with its reason: a report never calls a module free
of races when a declaration excused some of its pairs."""

import io
import json
import pathlib
import tempfile

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax._src.targets import table as table_form
from entangle_jax.testing._analysis import xla_changes
from entangle_jax.testing._emitters import github, json_report, sentences
from entangle_jax.testing._emitters import text as race_text
from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._findings.records import Run
from entangle_jax.testing._ways_in import command, module_files
from tests.hand_written_hlo import hlo_module


def run(*argv: str) -> tuple[int, str, str]:
  """The command's exit status, output and errors for `argv`."""
  out, err = io.StringIO(), io.StringIO()
  status = command.main(list(argv), out=out, err=err)
  return status, out.getvalue(), err.getvalue()


SAFE = {
  "targets": {
    "tp_counter_*": {"mode": "write", "object": 0},
    "tp_log_*": {"mode": "write", "object": 0},
  },
  "safe_pairs": [
    {
      "first": "tp_log_*",
      "second": "tp_counter_get",
      "reason": "the log has its own lock",
    }
  ],
}
LINE = (
  "`tp_log_*` / `tp_counter_get` (the log has its own lock; from "
  "pyproject.toml)"
)


def calls(*targets: str) -> str:
  """A module with one call per target, all on parameter 0, unordered."""
  lines = ["%p = s32[] parameter(0)"]
  for k, target in enumerate(targets):
    lines.append(
      f'%c{k} = s32[] custom-call(%p), custom_call_target="{target}", '
      "custom_call_has_side_effect=true"
    )
  return hlo_module("\n".join(lines))


def declarations(safe: bool = True) -> testing.Declarations:
  table = dict(SAFE) if safe else {"targets": SAFE["targets"]}
  return table_form.from_table(table, "pyproject.toml")


ALL_SAFE = calls("tp_log_a", "tp_counter_get")
SOME_SAFE = calls("tp_log_a", "tp_counter_get", "tp_counter_set")


class AnalysisTest(absltest.TestCase):
  def test_races_keep_what_safe_pairs_left_out(self):
    analysis = testing.OrderAnalysis(ALL_SAFE, declarations=declarations())
    found = analysis.races()
    self.assertEqual(found, [])
    (left,) = analysis.safe_pairs_left_out()
    self.assertEqual(left.race, ("c0", "c1"))
    self.assertEqual(left.pair.reason, "the log has its own lock")
    self.assertEqual(found.left_out, (left,))
    # Control: without the safe pair, the pair is a race, none left out.
    plain = testing.OrderAnalysis(ALL_SAFE, declarations=declarations(False))
    self.assertEqual(plain.races(), [("c0", "c1")])
    self.assertEqual(plain.safe_pairs_left_out(), [])


class TextTest(absltest.TestCase):
  def test_all_left_out_is_never_no_races(self):
    analysis = testing.OrderAnalysis(ALL_SAFE, declarations=declarations())
    text = testing.format_races(analysis.races())
    self.assertNotIn("No races", text)
    self.assertEqual(
      text.splitlines()[:2],
      [
        "1 pair of calls may conflict and run in either order, all left "
        "out as safe by declared safe_pairs (taken at their word, not "
        "checked):",
        f"  1 x {LINE}",
      ],
    )
    self.assertIn("Declarations applied: `tp_log_*` (write", text)
    # Text alone holds no module before optimization: the report says so.
    self.assertTrue(text.endswith(f"\nNote: {xla_changes.NOT_SEEN}"))
    # Given explicitly, with a plain list of races, the same report (a
    # plain list says nothing of what was at hand: no note).
    self.assertEqual(
      testing.format_races([], left_out=analysis.safe_pairs_left_out()),
      text.removesuffix(f"\nNote: {xla_changes.NOT_SEEN}"),
    )
    # Control: nothing left out, no race: "No races".
    self.assertEqual(testing.format_races([]), race_text.NO_RACES)

  def test_a_racing_report_counts_what_was_left_out(self):
    analysis = testing.OrderAnalysis(SOME_SAFE, declarations=declarations())
    found = analysis.races()
    self.assertLen(found, 2)  # The setter with the log and with the get.
    text = testing.format_races(found)
    self.assertIn("2 pairs of calls may conflict", text)
    self.assertIn(f"1 more pair left out as safe: {LINE}", text)
    # Control: no safe pair, no such line, and the text as before.
    plain = testing.OrderAnalysis(SOME_SAFE, declarations=declarations(False))
    text = testing.format_races(plain.races())
    self.assertIn("3 pairs of calls may conflict", text)
    self.assertNotIn("left out as safe", text)


class CommandTest(absltest.TestCase):
  def module(self, text: str) -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp())
    path = root / "module_1.jit_f.cpu_after_optimizations.txt"
    path.write_text(text)
    return path

  def test_summary_module_report_and_json_count_them(self):
    path = self.module(ALL_SAFE)
    result = module_files.check_module(path, declarations())
    self.assertEqual(result.races, [])
    run_ = Run([result])
    text = race_text.render(run_, Options(None))
    self.assertIn(f"  1 x {LINE}", text)
    self.assertNotIn("No races", text)
    self.assertTrue(
      text.endswith(
        "0 with races, 0 pairs; 1 more pair left out as safe by declared "
        "safe_pairs."
      ),
      text,
    )
    found = json.loads(json.dumps(json_report.as_json(run_)))
    self.assertEqual(found["safe_pairs_left_out"], 1)
    (entry,) = found["modules"][0]["safe_pairs_left_out"]
    self.assertEqual(
      {k: entry[k] for k in ("first", "second", "reason", "source", "count")},
      {
        "first": "tp_log_*",
        "second": "tp_counter_get",
        "reason": "the log has its own lock",
        "source": "pyproject.toml",
        "count": 1,
      },
    )
    self.assertEqual(entry["pairs"][0]["first"]["target"], "tp_log_a")
    # Control: without the safe pair, a race, and nothing left out.
    result = module_files.check_module(path, declarations(False))
    self.assertLen(result.races, 1)
    found = json_report.as_json(Run([result]))
    self.assertEqual(found["safe_pairs_left_out"], 0)
    self.assertEqual(found["modules"][0]["safe_pairs_left_out"], [])
    self.assertTrue(sentences.summary(Run([result])).endswith("1 pair."))

  def test_github_notes_them_without_failing(self):
    path = self.module(ALL_SAFE)
    result = module_files.check_module(path, declarations())
    (line,) = github.annotations(Run([result]))
    self.assertTrue(line.startswith("::notice title="), line)
    self.assertIn("1 pair of calls that may conflict", line)
    self.assertIn("(the log has its own lock; from pyproject.toml)", line)
    # Control: without the safe pair, the race is an error.
    result = module_files.check_module(path, declarations(False))
    (line,) = github.annotations(Run([result]))
    self.assertTrue(line.startswith("::error "), line)

  def test_the_command_reads_the_projects_safe_pairs(self):
    from tests.temp_project import project

    path = self.module(ALL_SAFE)
    table = """
    [tool.entangle-jax.targets."tp_*"]
    mode = "write"
    object = 0

    [[tool.entangle-jax.safe_pairs]]
    first = "tp_log_*"
    second = "tp_counter_get"
    reason = "the log has its own lock"
    """
    with project(table):
      status, out, _ = run(str(path))
    self.assertEqual(status, 0, out)
    self.assertIn("1 more pair left out as safe by declared safe_pairs.", out)
    self.assertIn("the log has its own lock; from ", out)

  def test_a_clean_module_names_the_declarations_that_decided(self):
    # The second call takes the first's result: ordered.
    text = calls("tp_log_a", "tp_other").replace(
      '(%p), custom_call_target="tp_other"',
      '(%c0), custom_call_target="tp_other"',
    )
    self.assertIn("(%c0)", text)
    path = self.module(text)
    result = module_files.check_module(path, declarations(False))
    self.assertEqual(result.races, [])
    report = race_text.module_report(result)
    self.assertIn(race_text.NO_RACES, report)
    self.assertIn("Declarations applied: `tp_log_*` (write", report)
    analysis = testing.OrderAnalysis(text, declarations=declarations(False))
    unseen = f"\nNote: {xla_changes.NOT_SEEN}"
    self.assertEqual(
      testing.format_races(analysis.races()),
      race_text.NO_RACES + "\n" + report.splitlines()[-1] + unseen,
    )
    # Control: with no declaration, no such line.
    result = module_files.check_module(path, testing.Declarations())
    self.assertNotIn("Declarations applied", race_text.module_report(result))
    plain = testing.OrderAnalysis(text, declarations=testing.Declarations())
    self.assertEqual(
      testing.format_races(plain.races()), race_text.NO_RACES + unseen
    )


if __name__ == "__main__":
  absltest.main()
