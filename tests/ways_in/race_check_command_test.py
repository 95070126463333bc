"""``python -m entangle_jax.testing PATH...``: the race check over XLA dumps,
exit status 0 / 1 / 2, the user's line, JSON, a bounded screen."""

import contextlib
import functools
import io
import json
import os
import pathlib
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest

from entangle_jax._src.targets import table
from entangle_jax.testing._emitters import sentences
from entangle_jax.testing._findings.records import Run
from entangle_jax.testing._ways_in import command as _check
from entangle_jax.testing._ways_in import module_files
from tests import preloaded_child, test_util
from tests.hand_written_hlo import hlo_module
from tests.test_util import records_full_stack

# A program as a user writes it: the example store's calls, on the lines
# the report must name.
RACY = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from entangle_jax.testing import read_slot, write_slot


  def step(slot):
    t = write_slot(slot, 1.0)
    x = read_slot(t)  # line 9
    write_slot(t, 2.0)  # line 10: nothing orders it after the read
    return x


  jax.jit(step)(jnp.int32(0)).block_until_ready()
  """
)
FIXED = RACY.replace(
  "write_slot(t, 2.0)  # line 10", "write_slot(entangle(t, x), 2.0)  # line 10"
).replace(
  "from entangle_jax.testing",
  "from entangle_jax import entangle\nfrom entangle_jax.testing",
)


def dump(program: str, root: pathlib.Path, name: str) -> pathlib.Path:
  """Runs `program` (as file `name` in `root`) with XLA dumping its
  modules; returns the dump directory."""
  source = root / name
  source.write_text(program)
  out = root / f"{source.stem}_dump"
  env = dict(
    test_util.child_env(),
    XLA_FLAGS=f"--xla_dump_to={out} --xla_dump_hlo_as_text",
  )
  result = preloaded_child.run([str(source)], timeout=180, env=env, cwd=root)
  if result.returncode:
    raise AssertionError(result.stderr[-3000:])
  return out


@functools.cache
def dumps() -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
  """The racy and the fixed program's dumps, made once for the file."""
  root = pathlib.Path(tempfile.mkdtemp())
  return (
    root,
    dump(RACY, root, "racy_program.py"),
    dump(FIXED, root, "fixed_program.py"),
  )


def run(*argv: str) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  status = _check.main(list(argv), out=out, err=err)
  return status, out.getvalue(), err.getvalue()


class DumpTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root, cls.racy, cls.fixed = dumps()

  def test_the_racy_dump_exits_1_naming_the_users_lines(self):
    status, out, _ = run(str(self.racy))
    self.assertEqual(status, 1, out)
    self.assertIn("== jit_step", out)
    self.assertIn("1 with races, 1 pair.", out)
    if records_full_stack():  # Older jax records only the store's frame.
      self.assertIn("racy_program.py:9", out)
      self.assertIn("racy_program.py:10", out)

  def test_the_fixed_dump_exits_0(self):
    status, out, _ = run(str(self.fixed))
    self.assertEqual(status, 0, out)
    self.assertIn("0 with races, 0 pairs.", out)

  def test_json_says_the_same(self):
    status, out, _ = run("--json", str(self.racy))
    self.assertEqual(status, 1)
    found = json.loads(out)
    self.assertEqual(found["status"], 1)
    (module,) = [m for m in found["modules"] if m["races"]]
    (race,) = module["races"]
    lines = {race["first"]["location"], race["second"]["location"]}
    if records_full_stack():  # Older jax records only the store's frame.
      self.assertEqual(
        {line.split(os.sep)[-1] for line in lines},
        {"racy_program.py:9", "racy_program.py:10"},
      )
    self.assertIn("cause", race)

  def test_format_json_is_json(self):
    self.assertEqual(
      run("--format", "json", str(self.racy)), run("--json", str(self.racy))
    )
    with self.assertRaises(SystemExit):  # Two formats asked for at once.
      run("--json", "--format", "github", str(self.racy))

  def test_github_annotates_the_users_line(self):
    status, out, err = run("--format", "github", str(self.racy))
    self.assertEqual(status, 1, err)
    (line,) = out.splitlines()  # One pair, one annotation.
    self.assertTrue(line.startswith("::error "), line)
    head, message = line.split("::", 2)[1:]
    self.assertIn("title=entangle-jax race", head)
    self.assertIn("the same object, and nothing orders them", message)
    self.assertNotIn("\n", message)
    if records_full_stack():  # Older jax records only the store's frame.
      place = dict(p.split("=", 1) for p in head.split(" ", 1)[1].split(","))
      self.assertTrue(place["file"].endswith("racy_program.py"), head)
      self.assertEqual(place["line"], "10", head)  # The later call's line.
      self.assertIn("racy_program.py:9", message)  # The other call's.
    self.assertIn("1 with races, 1 pair.", err)  # The summary, apart.

  def test_sarif_puts_the_rule_on_the_users_line(self):
    status, out, err = run("--format", "sarif", str(self.racy))
    self.assertEqual(status, 1, err)
    log = json.loads(out)
    self.assertEqual(log["version"], "2.1.0")
    (only,) = log["runs"]
    (result,) = only["results"]  # One pair, one finding.
    self.assertEqual(result["ruleId"], "EJ002")
    rules = only["tool"]["driver"]["rules"]
    self.assertEqual(rules[result["ruleIndex"]]["id"], "EJ002")
    self.assertIn("1 with races, 1 pair.", err)  # The summary, apart.
    if records_full_stack():  # Older jax records only the store's frame.
      (location,) = result["locations"]
      physical = location["physicalLocation"]
      self.assertEqual(physical["region"]["startLine"], 10)
      uri = physical["artifactLocation"]["uri"]
      self.assertTrue(uri.endswith("racy_program.py"), uri)
      (other,) = result["relatedLocations"]
      self.assertEqual(other["physicalLocation"]["region"]["startLine"], 9)
    # Control: a clean dump has no result, and exits 0.
    status, out, _ = run("--format", "sarif", str(self.fixed))
    self.assertEqual(status, 0)
    self.assertEqual(json.loads(out)["runs"][0]["results"], [])

  def test_github_says_nothing_of_a_clean_dump(self):
    # The control: no race, no annotation.
    status, out, err = run("--format", "github", str(self.fixed))
    self.assertEqual((status, out), (0, ""), err)
    self.assertIn("0 with races, 0 pairs.", err)

  def test_help_describes_path(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
      _check.main(["--help"])
    text = " ".join(out.getvalue().split())
    path_help = text.split("positional arguments: PATH", 1)[1]
    path_help = path_help.split("options:", 1)[0]
    self.assertIn("XLA dump folder", path_help)
    self.assertIn("HLO text file", path_help)

  def test_the_command_runs_as_a_module(self):
    result = preloaded_child.run(
      ["-m", "entangle_jax.testing", str(self.racy)],
      timeout=120,
      env=test_util.child_env(),
    )
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn("== jit_step", result.stdout)

  def test_a_module_file_alone(self):
    (module,) = self.racy.glob("*jit_step*cpu_after_optimizations.txt")
    self.assertEqual(run(str(module))[0], 1)

  def test_a_module_cut_short_is_no_answer(self):
    # The racy module cut before its calls: without them it would look
    # like a module with no native call, and so free of races.
    (module,) = self.racy.glob("*jit_step*cpu_after_optimizations.txt")
    text = module.read_text()
    cut = self.root / "cut" / module.name
    cut.parent.mkdir(exist_ok=True)
    cut.write_text(text[: text.index("custom-call")].rsplit("\n", 1)[0])
    status, out, _ = run(str(cut))
    self.assertEqual(status, 2)
    self.assertIn("Not checked: the module text is cut short", out)
    # Control: the whole module of a program without native calls is an
    # answer (no race).
    plain = next(
      m
      for m in self.fixed.glob(module_files.OPTIMIZED)
      if "custom-call" not in m.read_text()
    )
    self.assertEqual(run(str(plain))[0], 0)

  def test_a_fix_shared_by_several_modules_is_written_once(self):
    (module,) = self.racy.glob("*jit_step*cpu_after_optimizations.txt")
    twins = self.root / "twins"
    twins.mkdir(exist_ok=True)
    for n in (1, 2):
      (twins / f"module_{n}.jit_step.cpu_after_optimizations.txt").write_text(
        module.read_text()
      )
    status, out, _ = run(str(twins))
    self.assertEqual(status, 1)
    fixes = [line for line in out.splitlines() if line.startswith("  Fix: ")]
    self.assertEqual(len(fixes), 2, out)
    self.assertNotEqual(fixes[0], "  Fix: as above.")  # The first in full.
    self.assertEqual(fixes[1], "  Fix: as above.")
    # Control: one module's report has its fix in full.
    self.assertNotIn("as above", run(str(module))[1])

  def test_a_module_named_twice_is_checked_once(self):
    (module,) = self.racy.glob("*jit_step*cpu_after_optimizations.txt")
    once = run(str(self.racy))[1]
    twice = run(str(self.racy), str(self.racy) + "/", str(module))[1]
    self.assertEqual(once.splitlines()[-1], twice.splitlines()[-1])
    self.assertIn("1 with races, 1 pair.", twice)

  def test_another_platform_is_said_to_be_assumed(self):
    # A platform the check knows no runtime of (GPU and TPU modules have
    # their own notes: tests/ways_in/gpu_modules_test.py,
    # tests/hlo/host_callbacks_test.py).
    (module,) = self.racy.glob("*jit_step*cpu_after_optimizations.txt")
    other = self.root / module.name.replace("cpu_after", "xpu_after")
    other.write_text(module.read_text())
    status, out, _ = run(str(other))
    self.assertEqual(status, 1)
    self.assertIn("for xpu: the rules describe XLA:CPU's runtime", out)
    # Control: a CPU module needs no such note.
    self.assertNotIn("rules describe", run(str(module))[1])


SAFE = """
[[tool.entangle-jax.safe_pairs]]
first = "entangle_jax_read_slot"
second = "entangle_jax_write_slot"
reason = "a test: the store locks"
"""


class DeclarationsReadTest(absltest.TestCase):
  """The command names the pyproject.toml it read, or where it found none;
  --project names one so the answer does not depend on the working
  directory."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root, cls.racy, _ = dumps()

  def in_dir(self, directory: pathlib.Path, *argv: str):
    here = os.getcwd()
    os.chdir(directory)
    try:
      return run(*argv)
    finally:
      os.chdir(here)

  def test_none_found_is_said_and_project_names_one(self):
    bare = pathlib.Path(tempfile.mkdtemp())
    if table.find_pyproject(bare) is not None:
      self.skipTest(f"a pyproject.toml with a table lies above {bare}")
    status, out, _ = self.in_dir(bare, str(self.racy))
    self.assertEqual(status, 1, out)
    self.assertIn(
      f"no pyproject.toml with a [tool.entangle-jax] table found from "
      f"{bare.resolve()}",
      out,
    )
    project = pathlib.Path(tempfile.mkdtemp())
    (project / "pyproject.toml").write_text(SAFE)
    # The same directory, the declarations named: the pair is safe.
    for given in (project, project / "pyproject.toml"):
      status, out, _ = self.in_dir(
        bare, str(self.racy), "--project", str(given)
      )
      self.assertEqual(status, 0, out)
      self.assertIn(
        f"Declarations read from {(project / 'pyproject.toml').resolve()} "
        "(--project).",
        out,
      )

  def test_the_nearest_from_the_working_directory_is_named(self):
    project = pathlib.Path(tempfile.mkdtemp())
    (project / "pyproject.toml").write_text(SAFE)
    below = project / "sub"
    below.mkdir()
    status, out, _ = self.in_dir(below, str(self.racy), "--format", "json")
    self.assertEqual(status, 0, out)
    said = json.loads(out)["declarations"]
    self.assertEqual(
      said["pyproject"], str((project / "pyproject.toml").resolve())
    )

  def test_a_project_without_a_table_is_no_answer(self):
    project = pathlib.Path(tempfile.mkdtemp())
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    status, _, err = run(str(self.racy), "--project", str(project))
    self.assertEqual(status, 2)
    self.assertIn("has no [tool.entangle-jax] table", err)
    status, _, err = run(str(self.racy), "--project", str(project / "no"))
    self.assertEqual(status, 2)
    self.assertIn("no such file", err)


class CannotAnswerTest(absltest.TestCase):
  def test_exit_2_with_the_reason(self):
    with tempfile.TemporaryDirectory() as empty:
      status, _, err = run(empty)
      self.assertEqual(status, 2)
      self.assertIn("no optimized module", err)
      bad = pathlib.Path(empty) / "m.cpu_after_optimizations.txt"
      bad.write_text("HloModule m\n\nENTRY %main {\n}\n")
      status, out, _ = run(empty)
      self.assertEqual(status, 2)
      self.assertIn("is_scheduled=true", out)
      bad.write_text(
        "HloModule m, is_scheduled=true\n\n"
        "ENTRY %main {\n  %x = custom-call(\n}\n"
      )
      status, out, _ = run(str(bad))
      self.assertEqual(status, 2)
      self.assertIn(f"== m ({bad})\nNot checked: HLO text, line 4", out)
    status, out, err = run("--json", "/no/such/dump")
    self.assertEqual(status, 2)
    self.assertIn("no such file or directory", err)
    self.assertEqual(json.loads(out)["status"], 2)
    self.assertEqual(run()[0], 2)
    status, out, _ = run("--json")  # No path: JSON too.
    self.assertEqual((status, json.loads(out)["status"]), (2, 2))


class OneModuleNeverStopsTheRunTest(absltest.TestCase):
  """A module the check cannot answer for is named with its reason; every
  other module is checked and reported, and the status is 2."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root, cls.racy, cls.fixed = dumps()
    cls.dump = pathlib.Path(tempfile.mkdtemp())
    for module in [*cls.racy.glob(module_files.OPTIMIZED)]:
      (cls.dump / module.name).write_text(module.read_text())
    # A module it cannot read, as the parser met jax 0.11's compact tuple
    # elements before it knew them: an operand syntax it refuses.
    cls.broken = cls.dump / "module_9999.jit_broken.cpu_after_optimizations.txt"
    cls.broken.write_text(
      hlo_module(
        "%p = (s32[], s32[]) parameter(0)\n"
        '%w = s32[] custom-call(%p#1@2), custom_call_target="W", '
        "custom_call_has_side_effect=true"
      )
    )

  def test_text(self):
    status, out, _ = run(str(self.dump))
    self.assertEqual(status, 2)
    self.assertIn(
      f"== rules ({self.broken})\nNot checked: HLO text, line 5: cannot read "
      "the operands at '@2'",
      out,
    )
    # The racing module is reported all the same, and the summary says
    # what could not be checked.
    self.assertIn("== jit_step", out)
    self.assertIn("1 pair of calls may conflict", out)
    self.assertRegex(
      out,
      r"1 with races, 1 pair\. 1 module could not be checked \(see above\): "
      "not proven free of races",
    )
    # Control: without the broken module, the same dump exits 1.
    self.broken.rename(self.broken.with_suffix(".off"))
    try:
      status, out, _ = run(str(self.dump))
      self.assertEqual(status, 1)
      self.assertNotIn("Not checked", out)
    finally:
      self.broken.with_suffix(".off").rename(self.broken)

  def test_an_empty_file_is_named_as_one(self):
    empty = self.dump / "module_9998.jit_empty.cpu_after_optimizations.txt"
    empty.write_text("")
    try:
      status, out, _ = run(str(self.dump))
    finally:
      empty.unlink()
    self.assertEqual(status, 2)
    self.assertIn("Not checked: the file is empty", out)
    self.assertNotIn("Pass jax.jit(f)", out)

  def test_a_file_that_is_no_module_says_which_file_to_pass(self):
    # A command-line user passes files: the advice names the dump's files,
    # not the jax.stages.Compiled a Python caller would pass. Both paths:
    # a file without native calls (why_unreadable) and one with them (the
    # parser's refusal).
    texts = {
      "module_9997.jit_notes.cpu_after_optimizations.txt": "some notes\n",
      "module_9996.jit_unscheduled.cpu_after_optimizations.txt": (
        "HloModule jit_unscheduled\n\nENTRY %main () -> s32[] {\n"
        '  ROOT %w = s32[] custom-call(), custom_call_target="W", '
        "custom_call_has_side_effect=true\n}\n"
      ),
    }
    for name, text in texts.items():
      (self.dump / name).write_text(text)
    try:
      status, out, _ = run(str(self.dump))
    finally:
      for name in texts:
        (self.dump / name).unlink()
    self.assertEqual(status, 2)
    self.assertIn("line 1 is not an HloModule line: 'some notes'.", out)
    self.assertIn("line 1 lacks is_scheduled=true", out)
    self.assertEqual(out.count("*after_optimizations.txt of a dump"), 2)
    self.assertNotIn("Pass jax.jit(f)", out)
    # Control: a Python caller still gets the advice for Python.
    from entangle_jax.testing._hlo import parser

    with self.assertRaisesRegex(ValueError, r"Pass jax\.jit\(f\)"):
      parser.check_header("some notes\n")

  def test_an_unreadable_gpu_file_gets_no_gpu_note(self):
    # What the check assumes of GPU modules says nothing of a file it could
    # not read: the note is only for modules it read.
    name = "module_9995.jit_gone.sm_9.0a_gpu_after_optimizations.txt"
    unreadable = self.dump / name
    unreadable.write_bytes(b"\xff\xfe not text")
    try:
      status, out, err = run(str(self.dump))
      results = module_files.check([str(self.dump)])
    finally:
      unreadable.unlink()
    self.assertEqual(status, 2)
    self.assertIn("cannot read it", out)
    self.assertNotIn("CUDA", out + err)
    # Control: the same run, the file counted as read, gets the GPU note.
    (gone,) = [r for r in results if r.path == str(unreadable)]
    gone.unchecked = None
    note = sentences.platform_note(Run(results))
    self.assertIn("CUDA", note or "")

  def test_json_and_github(self):
    status, out, _ = run("--format", "json", str(self.dump))
    answer = json.loads(out)
    self.assertEqual((status, answer["status"]), (2, 2))
    by_path = {m["path"]: m for m in answer["modules"]}
    self.assertIn(
      "cannot read the operands", by_path[str(self.broken)]["unchecked"]
    )
    racing = [m for m in answer["modules"] if m["races"]]
    self.assertLen(racing, 1)
    self.assertIsNone(racing[0]["unchecked"])
    status, out, _ = run("--format", "github", str(self.dump))
    self.assertEqual(status, 2)
    (unchecked,) = [
      line for line in out.splitlines() if "module not checked" in line
    ]
    self.assertTrue(unchecked.startswith("::error title="), unchecked)
    self.assertIn("jit_broken", unchecked)
    self.assertIn("cannot read the operands", unchecked)
    self.assertLen([x for x in out.splitlines() if "race::" in x], 1)

  def test_a_bug_in_the_check_is_a_module_not_checked(self):
    # Whatever the analysis raises for one module, the others are checked.
    original = module_files.OrderAnalysis

    def broken(text, **kwargs):
      if "jit_step" in text.split("\n", 1)[0]:
        raise KeyError("boom")
      return original(text, **kwargs)

    with mock.patch.object(module_files, "OrderAnalysis", broken):
      results = module_files.check([str(self.dump)])
    (step,) = [r for r in results if r.module == "jit_step"]
    self.assertIn("KeyError: 'boom'", str(step.unchecked))
    self.assertIn("a bug in entangle-jax", str(step.unchecked))
    self.assertEqual(step.races, [])
    self.assertLen([r for r in results if r.unchecked], 2)


class ManyPairsTest(absltest.TestCase):
  def test_500_unordered_writes_fit_on_a_screen(self):
    # 124750 pairs: one group, one entry. (1500 writes, 1.1 million pairs,
    # took 16 s of the file's 60 s Bazel timeout on two loaded cores; the
    # time grows with the pairs.)
    calls = "\n".join(
      f'%w{k} = s32[] custom-call(%p), custom_call_target="tp_set", '
      "custom_call_has_side_effect=true"
      for k in range(500)
    )
    with tempfile.TemporaryDirectory() as root:
      path = pathlib.Path(root) / "m.cpu_after_optimizations.txt"
      path.write_text(hlo_module(f"%p = s32[] parameter(0)\n{calls}"))
      status, out, _ = run(str(path))
      self.assertEqual(status, 1)
      self.assertLess(len(out.splitlines()), 30, out)
      self.assertIn("124750 x a call the analysis knows nothing about", out)
      self.assertIn("(124750 pairs on these lines)", out)  # One entry.
      self.assertIn("Fix: ", out)


if __name__ == "__main__":
  absltest.main()
