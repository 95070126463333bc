"""``--ranks`` in every format (issue 70): text, JSON, GitHub annotations
and SARIF 2.1.0, on a mismatch, a deadlock, a collective under
rank-dependent control and a proved program (the stored mpi4jax modules,
data/ranks_mpi4jax/README.md), a possible deadlock (a hand-made result),
and ranks that compiled different modules. Each problem is a finding
with its stable code, both ranks' lines and the fix; the exit status is
the same in every format. Structure is asserted on the parsed output."""

import io
import json
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest, parameterized

from entangle_jax._src.targets import shipped
from entangle_jax.testing._analysis.across_ranks import (
  CrossRankResult,
  UnorderedCalls,
)
from entangle_jax.testing._emitters import formats, github
from entangle_jax.testing._findings import causes, from_ranks, rank_findings
from entangle_jax.testing._findings.rank_findings import RankRun
from entangle_jax.testing._ways_in import command

SHAPES = pathlib.Path(__file__).resolve().parent / "data" / "ranks_mpi4jax"
SCRIPT = "/work/scratch/i70ranks/mpi/shapes.py"
"""The user's file the stored modules record (their FileNames)."""

# Shape: (exit status, code, each rank's line in the user's file).
CASES: dict[str, tuple[int, str | None, tuple[int, ...]]] = {
  "swapped": (1, "EJ103", (21, 18)),
  "sendrecv_deadlock": (1, "EJ104", (52, 52)),
  "cond_local": (1, "EJ101", (29, 29)),
  "same_order": (0, None, ()),
}


def shipped_mpi4jax():
  """The shipped mpi4jax declarations in effect, as if mpi4jax 0.9.1 were
  installed."""
  (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
  return mock.patch.object(shipped, "installed", lambda: ((binding, "0.9.1"),))


def run_command(*args: str) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  with shipped_mpi4jax():
    status = command.main(list(args), out=out, err=err)
  return status, out.getvalue(), err.getvalue()


def ranks(shape: str) -> list[str]:
  return [str(SHAPES / shape / f"rank{r}") for r in (0, 1)]


def possible_deadlock() -> RankRun:
  """A result with two allreduces on rank 0 that nothing orders, at
  ``x.py`` lines 3 and 5."""
  result = CrossRankResult(
    "deadlock",
    2,
    unordered=(
      UnorderedCalls(
        0,
        "mpi_allreduce_ffi (%a) at x.py:3",
        "mpi_allreduce_ffi (%b) at x.py:5",
        "x.py:3",
        "x.py:5",
      ),
    ),
  )
  module = from_ranks.module_of("jit_f", ["r0/m.txt", "r1/m.txt"], result)
  return RankRun(2, (module,))


class FormatsTest(parameterized.TestCase):
  def test_every_format_of_the_one_table_writes_a_cross_rank_run(self):
    # One table for both checks (issue 79): each format names the finding
    # of a cross-rank run by its code.
    run = possible_deadlock()
    for name in formats.NAMES:
      self.assertIn("EJ102", formats.render(name, run), name)

  @parameterized.parameters(*CASES)
  def test_the_exit_status_is_the_same_in_every_format(self, shape):
    expected = CASES[shape][0]
    for name in formats.NAMES:
      status, _, _ = run_command("--ranks", *ranks(shape), "--format", name)
      self.assertEqual(status, expected, (shape, name))

  @parameterized.parameters(*CASES)
  def test_json(self, shape):
    status, out, err = run_command("--ranks", *ranks(shape), "--json")
    _, code, lines = CASES[shape]
    report = json.loads(out)
    self.assertEqual(report["status"], status)
    self.assertEqual(report["ranks"], 2)
    self.assertIn(report["summary"], err)
    (module,) = report["modules"]
    self.assertEqual(
      module["files"],
      # Each rank's record names the one execution of its module.
      [
        f"jit_{shape} ({next(pathlib.Path(f).glob('*.txt'))})"
        for f in ranks(shape)
      ],
    )
    if code is None:
      self.assertEqual(module["verdict"], "proved")
      self.assertEqual(module["findings"], [])
      self.assertNotEmpty(module["matched"])
      return
    (finding,) = module["findings"]
    self.assertEqual(finding["code"], code)
    self.assertEqual(finding["kind"], rank_findings.BY_CODE[code].verdict)
    self.assertEqual(finding["fix"], rank_findings.BY_CODE[code].fix)
    self.assertEqual([s["rank"] for s in finding["sites"]], [0, 1])
    self.assertEqual(tuple(s["line"] for s in finding["sites"]), lines)
    self.assertTrue(all(s["path"] == SCRIPT for s in finding["sites"]))

  @parameterized.parameters(*CASES)
  def test_sarif(self, shape):
    _, out, _ = run_command("--ranks", *ranks(shape), "--format", "sarif")
    _, code, lines = CASES[shape]
    log = json.loads(out)
    self.assertEqual(log["version"], "2.1.0")
    self.assertIn("sarif-2.1.0", log["$schema"])
    (only,) = log["runs"]
    rules = only["tool"]["driver"]["rules"]
    self.assertEqual(
      [r["id"] for r in rules], [k.code for k in rank_findings.RANK_KINDS]
    )
    for rule in rules:
      self.assertTrue(rule["help"]["text"].startswith("Fix: "))
    invocation = only["invocations"][0]
    self.assertTrue(invocation["executionSuccessful"])
    if code is None:
      self.assertEqual(only["results"], [])
      (note,) = invocation["toolExecutionNotifications"]
      self.assertEqual(note["level"], "note")
      self.assertStartsWith(
        note["message"]["text"], "Proved: module the executions of each rank"
      )
      return
    (result,) = only["results"]
    self.assertEqual(result["ruleId"], code)
    self.assertEqual(rules[result["ruleIndex"]]["id"], code)
    self.assertEqual(result["level"], "error")
    self.assertIn(
      f"Fix: {rank_findings.BY_CODE[code].fix}", result["message"]["text"]
    )
    (here,) = result["locations"]
    (other,) = result["relatedLocations"]
    places = [here, other]
    for place in places:
      physical = place["physicalLocation"]
      self.assertEqual(physical["artifactLocation"]["uri"], f"file://{SCRIPT}")
    self.assertEqual(
      tuple(p["physicalLocation"]["region"]["startLine"] for p in places), lines
    )
    self.assertStartsWith(other["message"]["text"], "rank 1: ")
    self.assertLen(result["partialFingerprints"]["entangleJaxRanks/v1"], 64)

  @parameterized.parameters(*CASES)
  def test_github(self, shape):
    _, out, err = run_command("--ranks", *ranks(shape), "--format", "github")
    _, code, lines = CASES[shape]
    if code is None:
      self.assertEqual(out, "")
      self.assertIn("1 proved", err)
      return
    (line,) = out.splitlines()
    kind = rank_findings.BY_CODE[code]
    self.assertStartsWith(
      line,
      f"::error file={SCRIPT},line={lines[0]},"
      f"title={github.RANKS_TITLE}%3A {kind.verdict}::{code}: ",
    )
    message = line.split("::", 2)[2]
    for rank, number in enumerate(lines):
      self.assertRegex(message, rf"rank {rank}: [^;]* at {SCRIPT}:{number}\b")
    self.assertIn(f"Fix: {kind.fix}", message)

  @parameterized.parameters(*CASES)
  def test_text(self, shape):
    status, out, _ = run_command("--ranks", *ranks(shape))
    _, code, _ = CASES[shape]
    if code is None:
      self.assertIn("Proved: the 2 ranks make 2 communicating calls", out)
    else:
      self.assertIn(f"[{code}]", out)
      self.assertIn(f"Fix: {rank_findings.BY_CODE[code].fix}", out)
    summary = out.strip().splitlines()[-1]
    self.assertStartsWith(summary, "Checked 1 communicating module across 2")
    self.assertEqual(summary.endswith(": 1 proved."), status == 0)


class PossibleDeadlockTest(absltest.TestCase):
  """Calls a rank may make in either order, in every format."""

  def test_its_finding_names_both_calls(self):
    run = possible_deadlock()
    self.assertEqual(run.status, 1)
    (module,) = json.loads(formats.render("json", run))["modules"]
    (finding,) = module["findings"]
    self.assertEqual(finding["code"], "EJ102")
    self.assertEqual(
      [(s["rank"], s["path"], s["line"]) for s in finding["sites"]],
      [(0, "x.py", 3), (0, "x.py", 5)],
    )
    (result,) = json.loads(formats.render("sarif", run))["runs"][0]["results"]
    self.assertEqual(result["ruleId"], "EJ102")
    self.assertEqual(
      result["locations"][0]["physicalLocation"]["artifactLocation"],
      {"uri": "x.py", "uriBaseId": "%SRCROOT%"},
    )
    (related,) = result["relatedLocations"]
    self.assertEqual(related["physicalLocation"]["region"]["startLine"], 5)
    (line,) = formats.render("github", run).splitlines()
    self.assertStartsWith(line, "::error file=x.py,line=3,")
    self.assertIn("EJ102: Possible deadlock: rank 0 may make", line)
    text = formats.render("text", run)
    self.assertIn("[EJ102]", text)
    self.assertIn(rank_findings.FIX_UNORDERED, text)


class DifferentModulesTest(absltest.TestCase):
  """Ranks that compiled different communicating modules: one mismatch,
  placed at the first module where the lists differ."""

  def folders(self) -> list[str]:
    text = next((SHAPES / "same_order" / "rank0").glob("*.txt")).read_text()
    root = pathlib.Path(tempfile.mkdtemp())
    folders = []
    for rank in (0, 1):
      folder = root / f"rank{rank}"
      folder.mkdir()
      name = "module_0001.jit_same_order.cpu_after_optimizations.txt"
      (folder / name).write_text(text)
      folders.append(str(folder))
    extra = pathlib.Path(folders[1]) / (
      "module_0002.jit_other.cpu_after_optimizations.txt"
    )
    extra.write_text(text)
    return folders

  def test_every_format(self):
    folders = self.folders()
    status, out, _ = run_command("--ranks", *folders, "--format", "sarif")
    self.assertEqual(status, 1)
    (result,) = json.loads(out)["runs"][0]["results"]
    self.assertEqual(result["ruleId"], "EJ103")
    physical = result["locations"][0]["physicalLocation"]
    # Rank 0 has no second module: its folder, without a line.
    self.assertEqual(
      physical["artifactLocation"]["uri"], pathlib.Path(folders[0]).as_uri()
    )
    self.assertNotIn("region", physical)
    _, out, _ = run_command("--ranks", *folders, "--json")
    (module,) = json.loads(out)["modules"]
    # A module's name is its HloModule line's: the copy's is the same.
    self.assertEqual(
      module["modules"], [["jit_same_order"], ["jit_same_order"] * 2]
    )
    (finding,) = module["findings"]
    self.assertEqual(finding["sites"][1]["path"], str(extra_of(folders)))
    _, out, _ = run_command("--ranks", *folders, "--format", "github")
    self.assertStartsWith(
      out, "::error title=entangle-jax across ranks%3A mismatch::EJ103: "
    )
    _, out, _ = run_command("--ranks", *folders)
    self.assertIn("rank 1 compiled 2 communicating modules", out)


def extra_of(folders: list[str]) -> pathlib.Path:
  return pathlib.Path(folders[1]) / (
    "module_0002.jit_other.cpu_after_optimizations.txt"
  )


class CodesTest(absltest.TestCase):
  def test_codes_are_distinct_from_the_single_process_causes(self):
    codes = [k.code for k in rank_findings.RANK_KINDS]
    self.assertLen(set(codes), len(codes))
    self.assertTrue(all(c.startswith("EJ1") and len(c) == 5 for c in codes))
    self.assertFalse(set(codes) & {k.code for k in causes.CAUSES})

  def test_the_page_lists_every_code(self):
    from tools import rule_docs

    page = rule_docs.PAGES["rank codes"]
    if not page.is_file():
      self.skipTest("no docs/ beside tests/")
    self.assertEqual(
      rule_docs.block_text(page.read_text(), "rank codes"),
      rank_findings.markdown(),
      f"run {rule_docs.COMMAND}",
    )


if __name__ == "__main__":
  absltest.main()
