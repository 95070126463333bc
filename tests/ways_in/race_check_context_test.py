"""``race_check()``: the race check for absltest, Bazel and plain programs.

The whole-run form, ``with race_check(): absltest.main()``, runs in a
fresh interpreter (XLA must dump from its first compile); what can be
tried in this process (whose backend started long ago, without a dump)
is that the check says it saw nothing rather than passing."""

import functools
import io
import os
import pathlib
import shutil
import subprocess
import tempfile
import textwrap
from unittest import mock

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax.testing import RaceCheckError, race_check
from entangle_jax.testing._ways_in import dump_watch as _dump_watch
from entangle_jax.testing._ways_in import race_check as _race_check
from tests import preloaded_child, test_util

PROGRAM_TEST = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from absl.testing import absltest
  from entangle_jax import entangle
  from entangle_jax.testing import race_check, read_slot, write_slot


  def step(slot):
    t = write_slot(slot, 1.0)
    x = read_slot(t)
    write_slot({token}, 2.0)
    return x


  class StepTest(absltest.TestCase):
    def test_step(self):
      self.assertEqual(float(jax.jit(step)(jnp.int32(0))), 1.0)


  if __name__ == "__main__":
    with race_check():
      absltest.main()
  """
)
RACY = PROGRAM_TEST.format(token="t")
FIXED = PROGRAM_TEST.format(token="entangle(t, x)")


# A declaration that does not fit the example store's read (its result is
# a float, not the handle): a module with that call cannot be checked.
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


def run_test_file(
  program: str, pyproject: str | None = None, **env: str
) -> subprocess.CompletedProcess:
  root = pathlib.Path(tempfile.mkdtemp())
  (root / "step_test.py").write_text(program)
  if pyproject is not None:
    (root / "pyproject.toml").write_text(pyproject)
  return preloaded_child.run(
    ["step_test.py"],
    timeout=300,
    env=dict(test_util.child_env(), **env),
    cwd=root,
  )


@functools.cache
def run_once(
  program: str, pyproject: str | None = None, env: tuple = ()
) -> tuple[subprocess.CompletedProcess, list[pathlib.Path]]:
  """`run_test_file` with TMPDIR a folder of its own, and the dumps the
  run's race_check kept there. Once for the module for each input
  (`env`: pairs): the tests that read the same run share it, each run a
  fresh interpreter that imports jax and compiles."""
  tmp = pathlib.Path(tempfile.mkdtemp())
  result = run_test_file(program, pyproject, TMPDIR=str(tmp), **dict(env))
  return result, sorted(tmp.glob("entangle-races-*"))


class WholeRunTest(absltest.TestCase):
  def test_a_racy_run_that_passed_exits_1_with_the_report(self):
    result, _ = run_once(RACY)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn("OK", result.stderr)  # The test itself passed.
    self.assertIn("entangle-jax race check", result.stderr)
    self.assertIn("== jit_step", result.stderr)
    self.assertIn("1 with races, 1 pair.", result.stderr)
    if test_util.records_full_stack():
      self.assertIn("step_test.py:11", result.stderr)

  def test_a_module_it_cannot_check_fails_the_run_naming_it(self):
    result, _ = run_once(FIXED, MISFIT)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn("OK", result.stderr)  # The test itself passed.
    self.assertRegex(
      result.stderr,
      r"== jit_step \(\S+\)\nNot checked: \S+pyproject.toml: target "
      "'entangle_jax_read_slot': returns_object",
    )
    self.assertIn("1 module could not be checked", result.stderr)
    # Control: the same run without the misfit declaration passes.
    result, _ = run_once(FIXED)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertNotIn("Not checked", result.stderr)

  def test_report_mode_from_the_environment_keeps_the_exit_status(self):
    result, _ = run_once(RACY, env=(("ENTANGLE_JAX_RACES", "report"),))
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("1 with races, 1 pair.", result.stderr)

  def test_control_the_fixed_run_exits_0(self):
    result, _ = run_once(FIXED)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn(
      "(1 with native calls): 0 with races, 0 pairs.", result.stderr
    )


def module_names(folder: pathlib.Path) -> set[str]:
  """The modules whose files are in `folder` (``module_0004.jit_step``)."""
  return {".".join(p.name.split(".")[:2]) for p in folder.rglob("module_*")}


class OwnDumpTest(absltest.TestCase):
  """A dump race_check made keeps only what it has to show."""

  def folder(self) -> pathlib.Path:
    made = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, made, ignore_errors=True)
    return made

  def run_in(self, program: str, **env: str):
    tmp = self.folder()
    result = run_test_file(program, TMPDIR=str(tmp), **env)
    return result, sorted(tmp.glob("entangle-races-*"))

  def test_a_racy_run_keeps_the_racing_module_only(self):
    result, dumps = run_once(RACY)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertLen(dumps, 1)
    names = module_names(dumps[0])
    self.assertLen(names, 1)
    self.assertTrue(next(iter(names)).endswith(".jit_step"), names)

  def test_a_clean_run_leaves_no_dump(self):
    result, dumps = run_once(FIXED)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(dumps, [])

  def test_control_a_dump_the_user_asked_for_is_left_whole(self):
    mine = self.folder()
    flags = f"--xla_dump_to={mine} --xla_dump_hlo_as_text"
    result, _ = self.run_in(FIXED, XLA_FLAGS=flags)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertTrue(any(n.endswith(".jit_step") for n in module_names(mine)))
    self.assertGreater(len(module_names(mine)), 1)  # Not only the step.


class InProcessTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    # race_check asks for a dump through XLA_FLAGS: keep it from leaking
    # into the child interpreters of other tests.
    self.enter_context(mock.patch.dict(os.environ))
    if _dump_watch.requested_dump() is not None:
      self.skipTest("this run dumps already: the check would see it")

  def test_compiles_it_could_not_see_fail_not_pass(self):
    # XLA reads its flags at its first compile, here without a dump:
    # asked for later, it writes none.
    x = jnp.arange(5.0)
    stream = io.StringIO()
    with self.assertRaises(RaceCheckError) as caught, race_check(stream=stream):
      jax.jit(lambda x: x * 3 + 1)(x).block_until_ready()
    self.assertIn("dumped none", str(caught.exception))
    self.assertIn("Checked 0 modules", stream.getvalue())
    # Control: with nothing compiled there is nothing unseen.
    with race_check(stream=io.StringIO()) as check:
      pass
    self.assertEqual(check.results, [])

  def test_report_mode_says_so_and_raises_nothing(self):
    x = jnp.arange(5.0)  # XLA's first compile, if nothing came before.
    stream = io.StringIO()
    with race_check("report", stream=stream):
      jax.jit(lambda x: x * 5 - 2)(x).block_until_ready()
    self.assertIn("dumped none", stream.getvalue())

  def test_jax_reports_each_compile(self):
    # The event name is JAX's, not public API: this fails when it changes.
    x = jnp.arange(3.0)
    watch = _dump_watch.DumpWatch(pathlib.Path(tempfile.mkdtemp()))
    self.assertFalse(watch.blind())  # Nothing compiled yet.
    fn = jax.jit(lambda x: x * 7 + 4)
    fn(x).block_until_ready()
    self.assertEqual(watch.compiles(), 1)
    fn(x).block_until_ready()  # Control: no compile, no count.
    self.assertEqual(watch.compiles(), 1)
    self.assertTrue(watch.blind())

  def test_off_does_nothing(self):
    before = os.environ.get("XLA_FLAGS")
    with race_check("off") as check:
      jax.jit(lambda x: x - 9)(jnp.arange(3.0)).block_until_ready()
    self.assertEqual(os.environ.get("XLA_FLAGS"), before)
    self.assertEqual(check.results, [])
    os.environ[_race_check.ENV] = "off"
    self.assertEqual(race_check().mode, "off")

  def test_a_bad_mode_is_named(self):
    with self.assertRaisesRegex(ValueError, "race_check: mode .* 'loud'"):
      race_check("loud")
    os.environ[_race_check.ENV] = "sometimes"
    with self.assertRaisesRegex(ValueError, r"\$ENTANGLE_JAX_RACES .*'some"):
      race_check()

  def test_the_plugin_reads_the_same_variable(self):
    # Imported here: it needs pytest, which Bazel's runfiles may lack.
    from entangle_jax.testing._ways_in import plugin

    self.assertEqual(plugin.ENV, _race_check.ENV)


if __name__ == "__main__":
  absltest.main()
