"""``pytest --entangle-races=fail|report``: the race check on a pytest run,
each case a pytest run of its own on a small test file."""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest

from entangle_jax.testing._ways_in import dump_place
from tests import test_util

PROGRAM = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from entangle_jax import entangle
  from entangle_jax.testing import read_slot, write_slot


  def step(slot):
    t = write_slot(slot, 1.0)
    x = read_slot(t)
    write_slot({token}, 2.0)
    return x


  def test_step():
    assert float(jax.jit(step)(jnp.int32(0))) == 1.0
  """
)
RACY = PROGRAM.format(token="t")
FIXED = PROGRAM.format(token="entangle(t, x)")

# The racy step under pmap, shard_map and a round trip through jax.export,
# on two devices: each compiles a module with the race. (What each reads
# is left unasserted: under pmap and export, XLA:CPU does run the write
# first at times.)
TRANSFORMED = PROGRAM.format(token="t").replace(
  "def test_step():",
  """def test_pmap():
  slots = jnp.arange(jax.device_count(), dtype=jnp.int32)
  jax.pmap(step)(slots).block_until_ready()


def test_shard_map():
  mesh = jax.make_mesh((jax.device_count(),), ("x",))
  P = jax.sharding.PartitionSpec
  fn = jax.shard_map(
    lambda s: step(s[0])[None], mesh=mesh, in_specs=P("x"), out_specs=P("x")
  )
  slots = jax.device_put(
    jnp.arange(jax.device_count(), dtype=jnp.int32),
    jax.sharding.NamedSharding(mesh, P("x")),
  )
  jax.jit(fn)(slots).block_until_ready()


def test_export():
  from entangle_jax import export_safety_checks
  from entangle_jax.testing.example_store import (
    READ_SLOT_TARGET,
    WRITE_SLOT_TARGET,
  )

  checks = [
    *export_safety_checks(),
    jax.export.DisabledSafetyCheck.custom_call(READ_SLOT_TARGET),
    jax.export.DisabledSafetyCheck.custom_call(WRITE_SLOT_TARGET),
  ]
  exported = jax.export.export(jax.jit(step), disabled_checks=checks)
  restored = jax.export.deserialize(exported(jnp.int32(0)).serialize())
  jax.jit(restored.call)(jnp.int32(0)).block_until_ready()


def _unused():""",
)

XDIST = importlib.util.find_spec("xdist") is not None

# A loop that carries the token, then a read and a write after it that
# nothing orders: from jaxlib 0.11 on, XLA's dumps pass the loop's token
# on as a compact tuple element (%while.N#1). A second pair: the last
# iteration's read reaches no write (only its total does), so only the
# loop, run as one op, orders it before the write after the loop (EJ008:
# XLA may split a loop).
LOOP = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from entangle_jax.testing import read_slot, write_slot


  def loop(slot):
    def body(i, carry):
      token, total = carry
      token = write_slot(token, total + 1.0)
      return token, total + read_slot(token)

    token, total = jax.lax.fori_loop(0, 3, body, (slot, jnp.float32(0)))
    value = read_slot(token)
    write_slot(token, 5.0)
    return total + value


  def test_loop():
    jax.jit(loop)(jnp.int32(0)).block_until_ready()


  def test_plain():
    assert 1 + 1 == 2
  """
)

# A declaration that does not fit the example store's read (its result is
# a float, not the handle): no module with that call can be checked.
MISFIT = textwrap.dedent(
  """
  [project]
  name = "user-project"

  [tool.entangle-jax.targets."entangle_jax_read_slot"]
  mode = "read"
  object = 0
  returns_object = [0]
  """
)


def project(**files: str) -> pathlib.Path:
  root = pathlib.Path(tempfile.mkdtemp())
  for name, text in files.items():
    (root / name).write_text(text)
  return root


class PluginTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The runs several tests read (`shared_run`), and where they keep
    # their dumps: each such run costs a child interpreter that imports
    # jax, the most of this file's time.
    cls.shared_tmp = pathlib.Path(tempfile.mkdtemp())
    cls.addClassCleanup(shutil.rmtree, cls.shared_tmp, ignore_errors=True)
    cls.shared_runs = {}

  def shared_run(self, name: str, text: str, *args: str):
    """pytest with `args` on a project of the one test file `name`, run
    once for the class (with TMPDIR the class's `shared_tmp`): the tests
    that ask for the same run read the same output and kept dump."""
    key = (name, text, args)
    if key not in self.shared_runs:
      with mock.patch.dict(os.environ, {"TMPDIR": str(self.shared_tmp)}):
        self.shared_runs[key] = test_util.pytest_run(
          project(**{name: text}), *args
        )
    return self.shared_runs[key]

  def setUp(self):
    super().setUp()
    # The runs' temporary files, their kept dumps among them, go in a
    # folder of the test's own, removed after it: with no TMPDIR the
    # plugin's dump goes on /dev/shm, where a kept one holds memory.
    self.tmp = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.enter_context(mock.patch.dict(os.environ, {"TMPDIR": str(self.tmp)}))

  def test_its_own_dump_goes_on_the_tmpfs_unless_tmpdir_is_set(self):
    racy = project(**{"test_racy.py": RACY})

    def kept_in(result) -> pathlib.Path:
      out = result.stdout + result.stderr
      self.assertEqual(result.returncode, 0, out)
      (kept,) = re.findall(r"The dump is kept at (\S+) ", result.stdout)
      return pathlib.Path(kept).parent

    def run() -> subprocess.CompletedProcess:
      result = test_util.pytest_run(racy, "--entangle-races=report")
      kept = re.findall(r"The dump is kept at (\S+) ", result.stdout)
      for folder in kept:
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
      return result

    # TMPDIR set: there.
    shared = self.shared_run("test_racy.py", RACY, "--entangle-races=report")
    self.assertEqual(kept_in(shared), self.shared_tmp)
    # Unset: where dump_place says, on this machine (/dev/shm when usable).
    with mock.patch.dict(os.environ):
      del os.environ["TMPDIR"]
      parent = dump_place.dump_parent(tmpfs=True)
      if parent is not None:
        self.assertEqual(kept_in(run()), parent)
      else:
        self.assertNotEqual(kept_in(run()), dump_place.TMPFS)

  def test_fail_fails_a_racy_test_and_passes_its_fixed_twin(self):
    racy = project(**{"test_racy.py": RACY})
    result = test_util.pytest_run(racy, "--entangle-races=fail")
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn("the modules this test compiled race", result.stdout)
    self.assertIn("1 failed", result.stdout)
    # The report once, with the failure; the summary points at it. (pytest's
    # short summary below repeats the failure's text in full when $CI is
    # set: only what comes before it counts.)
    before_summary = result.stdout.split("short test summary info")[0]
    self.assertEqual(before_summary.count("== jit_step"), 1, result.stdout)
    self.assertIn("failed the tests that compiled them", result.stdout)
    if test_util.records_full_stack():
      self.assertIn("test_racy.py:10", result.stdout)
    result = self.shared_run("test_fixed.py", FIXED, "--entangle-races=fail")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("0 with races, 0 pairs.", result.stdout)

  def test_report_passes_and_summarises(self):
    result = self.shared_run("test_racy.py", RACY, "--entangle-races=report")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("1 passed", result.stdout)
    self.assertIn("entangle-jax race check", result.stdout)
    self.assertIn("1 with races, 1 pair.", result.stdout)
    # The summary names the test that compiled the racing module.
    self.assertIn(", compiled by test_racy.py::test_step", result.stdout)

  def test_a_test_failing_on_its_own_gets_the_report_once(self):
    # test_step races; test_also_fails races and fails its own assertion.
    failing = RACY + (
      "\n\ndef test_also_fails():\n"
      "  jax.jit(lambda s: step(s) * 2.0)(jnp.int32(1))\n"
      "  assert False\n"
    )
    root = project(**{"test_racy.py": failing})
    result = test_util.pytest_run(root, "--entangle-races=fail")
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    before_summary = result.stdout.split("short test summary info")[0]
    self.assertIn("the race check fails this test too", before_summary)
    # Each racing module once: with its test's failure, not again at the end.
    self.assertEqual(before_summary.count("== jit_"), 2, result.stdout)
    self.assertIn("2 racing module(s) failed the tests", result.stdout)
    # Its FAILED line says the race check failed it too.
    self.assertRegex(
      result.stdout,
      r"FAILED test_racy.py::test_also_fails - .*and the race check",
    )

  def test_a_control_marked_as_racing_on_purpose_does_not_fail(self):
    marked = RACY.replace(
      "def test_step():",
      "@pytest.mark.entangle_races_expected\ndef test_step():",
    ).replace("import jax\n", "import jax\nimport pytest\n", 1)
    root = project(**{"test_control.py": marked})
    result = test_util.pytest_run(
      root, "--entangle-races=fail", "--strict-markers", "-rA"
    )
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("1 passed", result.stdout)
    self.assertIn("entangle-jax races (expected)", result.stdout)
    self.assertIn("marked entangle_races_expected", result.stdout)
    # Still counted: the summary's module count holds it.
    self.assertIn("1 with races, 1 pair.", result.stdout)
    # The marker is known when the check is off too (--strict-markers).
    result = test_util.pytest_run(root, "--strict-markers")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

  def test_a_control_is_no_error_in_github_sarif_or_json(self):
    marked = RACY.replace(
      "def test_step():",
      "@pytest.mark.entangle_races_expected\ndef test_step():",
    ).replace("import jax\n", "import jax\nimport pytest\n", 1)
    root = project(**{"test_control.py": marked})
    written = {}
    for kind in ("github", "sarif", "json"):
      out = root / f"races.{kind}"
      result = test_util.pytest_run(
        root,
        "--entangle-races=fail",
        f"--entangle-format={kind}",
        f"--entangle-output={out}",
      )
      self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
      written[kind] = out.read_text()
    (line,) = written["github"].splitlines()
    self.assertTrue(line.startswith("::notice "), line)
    self.assertIn("expected", line)
    (finding,) = json.loads(written["sarif"])["runs"][0]["results"]
    self.assertEqual(finding["suppressions"][0]["kind"], "inSource")
    answer = json.loads(written["json"])
    self.assertEqual(answer["status"], 0)
    self.assertEqual(
      [m["expected"] for m in answer["modules"] if m["races"]], [True]
    )
    # Control: the same test unmarked is an error, unsuppressed, status 1.
    root = project(**{"test_racy.py": RACY})
    out = root / "races.sarif"
    test_util.pytest_run(
      root,
      "--entangle-races=report",
      "--entangle-format=sarif",
      f"--entangle-output={out}",
    )
    (finding,) = json.loads(out.read_text())["runs"][0]["results"]
    self.assertNotIn("suppressions", finding)

  @absltest.skipUnless(
    XDIST, "pytest-xdist is not installed here (real-libraries group)"
  )
  def test_xdist_workers_check_their_own_tests_and_the_controller_sums_up(
    self,
  ):
    files = {
      "test_a.py": RACY,
      "test_b.py": RACY.replace("step", "step_b"),
      "test_c.py": FIXED,
      "test_d.py": FIXED.replace("step", "step_d"),
    }
    root = project(**files)
    serial = test_util.pytest_run(root, "--entangle-races=fail", "-n", "0")
    spread = test_util.pytest_run(root, "--entangle-races=fail", "-n", "2")
    for result in (serial, spread):
      out = result.stdout + result.stderr
      self.assertEqual(result.returncode, 1, out)
      # Each racing test fails in its worker, named with what asked.
      self.assertIn("2 failed, 2 passed", result.stdout)
      for test in ("test_a.py::test_step", "test_b.py::test_step_b"):
        self.assertIn(f"FAILED {test} - the modules this test", out)
      self.assertIn("switched on by --entangle-races=fail", result.stdout)
      # One summary for the run: the same racing modules and pairs.
      self.assertEqual(result.stdout.count("entangle-jax race check"), 1)
      self.assertIn("2 with races, 2 pairs.", result.stdout)
      self.assertIn("2 racing module(s) failed the tests", result.stdout)
    (kept,) = re.findall(r"The dump is kept at (\S+) ", spread.stdout)
    # Each worker dumped to a folder of its own, keeping only what raced.
    folders = {p.parent.name for p in pathlib.Path(kept).rglob("*.txt")}
    self.assertLessEqual(folders, {"gw0", "gw1"}, spread.stdout)
    self.assertNotIn("does not work with pytest-xdist", spread.stderr)

  def test_entangle_format_github_and_a_format_it_does_not_know(self):
    racy = project(**{"test_racy.py": RACY})
    result = test_util.pytest_run(
      racy, "--entangle-races=report", "--entangle-format=github"
    )
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("::")]
    self.assertTrue(line.startswith("::error "), line)
    self.assertIn("EJ002", line)
    self.assertIn("1 with races, 1 pair.", result.stdout)  # Text too.
    # Control: a format the table does not hold is a usage error.
    result = test_util.pytest_run(
      racy, "--entangle-races=report", "--entangle-format=yaml"
    )
    self.assertEqual(result.returncode, 4, result.stdout + result.stderr)
    self.assertIn("must be one of text, json, github, sarif", result.stderr)

  @absltest.skipUnless(
    XDIST, "pytest-xdist is not installed here (real-libraries group)"
  )
  def test_xdist_workers_send_records_and_the_controller_writes_sarif(self):
    root = project(**{"test_a.py": RACY, "test_c.py": FIXED})
    out = root / "races.sarif"
    result = test_util.pytest_run(
      root,
      "--entangle-races=report",
      "-n",
      "2",
      "--entangle-format=sarif",
      f"--entangle-output={out}",
    )
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn(f"The sarif report is written to {out}.", result.stdout)
    (run,) = json.loads(out.read_text())["runs"]
    (finding,) = run["results"]
    self.assertEqual(finding["ruleId"], "EJ002")
    if test_util.records_full_stack():
      (location,) = finding["locations"]
      region = location["physicalLocation"]["region"]
      later = RACY.splitlines().index("  write_slot(t, 2.0)") + 1
      self.assertEqual(region["startLine"], later)

  @absltest.skipUnless(
    XDIST, "pytest-xdist is not installed here (real-libraries group)"
  )
  def test_xdist_from_addopts_switched_on_by_the_environment(self):
    root = project(
      **{
        "pytest.ini": "[pytest]\naddopts = -n auto\n",
        "test_a.py": RACY,
        "test_c.py": FIXED,
      }
    )
    result = test_util.pytest_run(root, ENTANGLE_JAX_RACES="report")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("race check (ENTANGLE_JAX_RACES=report)", result.stdout)
    self.assertIn("1 with races, 1 pair.", result.stdout)
    self.assertIn(", compiled by test_a.py::test_step", result.stdout)
    # Control: nothing raced, and the dump is removed.
    result = test_util.pytest_run(
      project(
        **{"pytest.ini": "[pytest]\naddopts = -n 2\n", "test_c.py": FIXED}
      ),
      ENTANGLE_JAX_RACES="fail",
    )
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("0 with races, 0 pairs.", result.stdout)
    self.assertNotIn("The dump is kept", result.stdout)

  def test_report_leaves_the_compilation_cache_as_the_run_sets_it(self):
    def uses_cache() -> pathlib.Path:
      """A project whose test fills a cache directory of its own."""
      cache = tempfile.mkdtemp()
      test = RACY.replace(
        "def test_step():",
        "def test_step():\n"
        f'  jax.config.update("jax_compilation_cache_dir", {cache!r})\n'
        '  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)'
        '\n  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)',
      ).replace(
        "== 1.0\n",
        f"== 1.0\n  import os\n  assert os.listdir({cache!r})\n",
      )
      return project(**{"test_cache.py": test})

    result = test_util.pytest_run(uses_cache(), "--entangle-races=report")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("1 passed", result.stdout)
    # Control: `fail` switches the cache off, and the test's assertion
    # finds its cache empty.
    result = test_util.pytest_run(uses_cache(), "--entangle-races=fail")
    self.assertIn("assert []", result.stdout)

  def test_a_conftest_that_replaces_xla_flags_is_named(self):
    conftest = (
      "import os\n"
      'os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"\n'
    )
    root = project(**{"conftest.py": conftest, "test_racy.py": RACY})
    result = test_util.pytest_run(root, "--entangle-races=fail")
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn("XLA_FLAGS no longer asks for the dump", result.stdout)

  def test_the_dump_is_kept_only_when_it_has_something_to_show(self):
    result = self.shared_run("test_racy.py", RACY, "--entangle-races=report")
    (kept,) = re.findall(
      r"The dump is kept at (\S+) \((\d+) file\(s\), ([\d.]+ [kM]B)\)",
      result.stdout,
    )
    # Only the racing module's files (all share its module_NNNN. prefix).
    prefixes = {
      p.name.split(".", 1)[0] + "." for p in pathlib.Path(kept[0]).iterdir()
    }
    self.assertEqual(len(prefixes), 1, result.stdout)
    files = [p for p in pathlib.Path(kept[0]).rglob("*") if p.is_file()]
    self.assertEqual(int(kept[1]), len(files), result.stdout)
    # XLA wrote the optimized module, with the metadata the check reads,
    # and not the reports the plugin's dump asks it to leave out.
    (optimized,) = [
      p for p in files if p.name.endswith("after_optimizations.txt")
    ]
    self.assertIn("op_name=", optimized.read_text())
    names = [p.name for p in files]
    self.assertTrue(any("-buffer-assignment.txt" in n for n in names), names)
    self.assertFalse(any("-live-range" in n for n in names), names)
    result = self.shared_run("test_fixed.py", FIXED, "--entangle-races=fail")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertNotIn("The dump is kept", result.stdout)

  def test_nothing_is_left_in_the_temp_dir_however_the_run_ends(self):
    def run(root: pathlib.Path, *args: str, rc: int) -> tuple[str, list[str]]:
      """stderr, and what the run left in a temp dir of its own."""
      tmp = pathlib.Path(tempfile.mkdtemp())
      result = test_util.pytest_run(root, *args, quiet=False, TMPDIR=str(tmp))
      self.assertEqual(result.returncode, rc, result.stdout + result.stderr)
      left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
      return result.stderr, left

    fixed = project(**{"test_fixed.py": FIXED})
    # A usage error, after the plugin made its dump: nothing left.
    _, left = run(fixed, "--entangle-races=fail", "--no-such-option", rc=4)
    self.assertEqual(left, [])
    # No terminal reporter, hence no summary: nothing raced, nothing left.
    no_summary = ("-p", "no:terminal", "--entangle-races=report")
    _, left = run(fixed, *no_summary, rc=0)
    self.assertEqual(left, [])
    # A race: its files are kept, and stderr says where.
    stderr, left = run(project(**{"test_racy.py": RACY}), *no_summary, rc=0)
    (kept,) = re.findall(r"The dump is kept at (\S+) \(", stderr)
    self.assertEqual({p.split("/")[0] for p in left}, {pathlib.Path(kept).name})
    self.assertTrue(any(p.endswith("after_optimizations.txt") for p in left))

  def test_a_loop_that_carries_the_token_is_checked(self):
    root = project(**{"test_loop.py": LOOP})
    result = test_util.pytest_run(root, "--entangle-races=report")
    out = result.stdout + result.stderr
    self.assertEqual(result.returncode, 0, out)
    self.assertIn("2 passed", result.stdout)
    self.assertIn("1 with races, 2 pairs.", result.stdout)
    self.assertIn("[EJ008]", result.stdout)
    self.assertNotIn("INTERNALERROR", out)
    self.assertNotIn("Not checked", out)
    result = test_util.pytest_run(root, "--entangle-races=fail")
    self.assertEqual(result.returncode, 1, out)
    self.assertIn("1 failed, 1 passed", result.stdout)

  def test_a_module_it_cannot_check_never_stops_the_run(self):
    root = project(
      **{"pyproject.toml": MISFIT, "test_loop.py": LOOP, "test_racy.py": RACY}
    )
    for mode, status in (("fail", 1), ("report", 0)):
      with self.subTest(mode):
        result = test_util.pytest_run(root, f"--entangle-races={mode}")
        out = result.stdout + result.stderr
        self.assertEqual(result.returncode, status, out)
        self.assertNotIn("INTERNALERROR", out)
        # Every test's outcome is its own.
        self.assertIn("3 passed", result.stdout)
        # Each module named, with the test that compiled it and the reason.
        for test in ("test_loop.py::test_loop", "test_racy.py::test_step"):
          self.assertRegex(
            result.stdout,
            rf"== jit_\w+ \(\S+\), compiled by {test}\nNot checked: "
            r"\S+pyproject.toml: target 'entangle_jax_read_slot': "
            r"returns_object = \[0\] names result 0",
          )
        fails = " The run fails" if mode == "fail" else ""
        self.assertIn(
          "2 module(s) could not be checked (each named above, with the "
          f"reason): not proven free of races.{fails}",
          result.stdout,
        )
        self.assertIn("2 modules could not be checked", result.stdout)
    # Control: without the misfit declaration, the same files are checked.
    (root / "pyproject.toml").unlink()
    result = test_util.pytest_run(root, "--entangle-races=report")
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertIn("2 with races, 3 pairs.", result.stdout)
    self.assertNotIn("Not checked", result.stdout)
    self.assertNotIn("module(s) could not be checked", result.stdout)

  def test_control_without_the_option_nothing_changes(self):
    racy = project(**{"test_racy.py": RACY})
    result = test_util.pytest_run(racy)
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
    self.assertNotIn("entangle-jax race check", result.stdout)

  def test_pmap_shard_map_and_export_switched_on_by_the_environment(self):
    root = project(**{"test_transformed.py": TRANSFORMED})
    result = test_util.pytest_run(
      root, ENTANGLE_JAX_RACES="fail", JAX_NUM_CPU_DEVICES="2"
    )
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    for test in ("test_pmap", "test_shard_map", "test_export"):
      self.assertIn(
        f"FAILED test_transformed.py::{test} - the modules", result.stdout
      )
    self.assertIn("3 failed", result.stdout)

  def test_a_conftest_that_jits_at_import_is_seen(self):
    conftest = RACY.replace("def test_step():", "def _unused():") + (
      "\njax.jit(step)(jnp.int32(1)).block_until_ready()\n"
    )
    root = project(
      **{"conftest.py": conftest, "test_plain.py": "def test_x():\n  pass\n"}
    )
    result = test_util.pytest_run(root, "--entangle-races=fail")
    # Compiled outside any test's call: checked at the end, and the run
    # fails.
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn("outside any test's call", result.stdout)
    self.assertIn("1 with races", result.stdout)

  def test_a_module_from_the_compilation_cache_is_not_passed(self):
    cache = tempfile.mkdtemp()
    cached = RACY.replace(
      "def test_step():",
      "def test_step():\n"
      '  jax.config.update("jax_enable_compilation_cache", True)\n'
      f'  jax.config.update("jax_compilation_cache_dir", {cache!r})\n'
      '  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)\n'
      '  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)',
    )
    root = project(**{"test_cached.py": cached})
    first = test_util.pytest_run(root, "--entangle-races=report")
    self.assertIn("1 with races", first.stdout, first.stdout + first.stderr)
    again = test_util.pytest_run(root, "--entangle-races=fail")
    self.assertIn("came from JAX's persistent compilation cache", again.stdout)
    if "left no module to check" in again.stdout:
      # Not seen, so not passed either.
      self.assertIn("not proven free of races", again.stdout)
      self.assertIn("The run fails (--entangle-races=fail).", again.stdout)
      # Nothing else went wrong: the dump itself worked.
      self.assertNotIn("dumped none", again.stdout)
      self.assertEqual(again.returncode, 1, again.stdout)
    else:  # XLA dumped what it loaded: checked, and the race found.
      self.assertIn("1 with races", again.stdout)
      self.assertEqual(again.returncode, 1, again.stdout)


if __name__ == "__main__":
  absltest.main()
