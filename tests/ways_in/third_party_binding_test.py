"""The race check on a binding that never imports entangle-jax.

``tp`` (tests/third_party_binding) is built here as its own project would
build it: a plain compiler and the installed jaxlib's FFI headers, its
targets registered through ``jax.ffi``. A program makes twelve
set / get / set hazards on separate counters; the command, the pytest
plugin and ``race_check`` each catch them, naming the program's lines,
and pass the same program fixed with ``Resource``.
"""

import contextlib
import io
import os
import pathlib
import re
import shutil
import tempfile
import textwrap

from absl.testing import absltest

from entangle_jax.testing._ways_in import command as _check
from tests import preloaded_child, test_util
from tests.test_util import pytest_run
from tests.third_party_binding.build import build

HAZARDS = textwrap.dedent(
  """
  import functools

  import jax
  import jax.numpy as jnp
  import numpy as np
  import tp
  from entangle_jax import Resource

  HAZARDS = 12


  def racy(handles, big):
    reads = []
    for i in range(HAZARDS):
      h = tp.set_counter(handles[i], 1.0)
      reads.append(tp.get_counter(h, delay_us=2000))  # line 17
      tp.set_counter(h, 2.0)  # line 18: nothing orders it after the read
    return jnp.stack(reads), jnp.sin(big).sum()


  def fixed(handles, big):
    reads = []
    for i in range(HAZARDS):
      counter = Resource(handles[i], name=f"counter {i}")
      counter.write(tp.set_counter, 1.0)
      get = functools.partial(tp.get_counter, delay_us=2000)
      reads.append(counter.read(get))
      counter.write(tp.set_counter, 2.0)  # after the read
    return jnp.stack(reads), jnp.sin(big).sum()


  def wrong_reads(fn):
    handles = jnp.arange(HAZARDS, dtype=jnp.int32)
    big = jnp.ones(1 << 16)  # Large enough for XLA:CPU's concurrent runtime.
    return [
      int(np.sum(np.asarray(jax.jit(fn)(handles, big)[0]) != 1.0))
      for _ in range(5)
    ]
  """
)
RACY_LINES = ("program.py:17", "program.py:18")

DECLARATIONS = textwrap.dedent(
  """
  [project]
  name = "user-project"

  [tool.entangle-jax]
  distinct_elements = true

  [tool.entangle-jax.targets."tp_counter_set"]
  mode = "write"
  object = 0
  returns_object = [0]

  [tool.entangle-jax.targets."tp_counter_get"]
  mode = "read"
  object = 0
  """
)

TESTS = textwrap.dedent(
  """
  from program import fixed, racy, wrong_reads


  def test_racy():
    wrong_reads(racy)


  def test_fixed():
    assert wrong_reads(fixed) == [0] * 5
  """
)

ABSLTEST = textwrap.dedent(
  """
  from absl.testing import absltest
  from entangle_jax.testing import race_check
  from program import fixed, racy, wrong_reads


  class ProgramTest(absltest.TestCase):
    def setUp(self):
      super().setUp()
      self.enter_context(race_check())

    def test_racy(self):
      wrong_reads(racy)

    def test_fixed(self):
      self.assertEqual(wrong_reads(fixed), [0] * 5)


  if __name__ == "__main__":
    absltest.main()
  """
)


def run_here(root: pathlib.Path, *argv: str) -> tuple[int, str]:
  """The command, in this process, run from `root` (whose pyproject.toml,
  if any, holds the declarations)."""
  out = io.StringIO()
  here = os.getcwd()
  os.chdir(root)
  try:
    with contextlib.redirect_stderr(io.StringIO()):
      status = _check.main(list(argv), out=out)
  finally:
    os.chdir(here)
  return status, out.getvalue()


def dump(root: pathlib.Path, fn: str) -> tuple[pathlib.Path, list[int]]:
  """Runs program.py's `fn` with XLA dumping; returns the dump and the
  wrong reads of each run."""
  out = root / f"{fn}_dump"
  result = preloaded_child.run(
    ["-c", f"import program; print(program.wrong_reads(program.{fn}))"],
    timeout=180,
    env=dict(
      test_util.child_env(),
      XLA_FLAGS=f"--xla_dump_to={out} --xla_dump_hlo_as_text",
    ),
    cwd=root,
  )
  if result.returncode:
    raise AssertionError(result.stderr[-3000:])
  return out, [int(n) for n in re.findall(r"\d+", result.stdout)]


class ThirdPartyBindingTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp())
    build(cls.root)
    (cls.root / "program.py").write_text(HAZARDS)
    cls.racy, _ = dump(cls.root, "racy")
    cls.fixed, cls.fixed_wrong = dump(cls.root, "fixed")
    # The same project, with a pyproject.toml that declares tp's targets.
    cls.declared = pathlib.Path(tempfile.mkdtemp())
    (cls.declared / "pyproject.toml").write_text(DECLARATIONS)

  def assert_names_the_programs_lines(self, out: str) -> None:
    if test_util.records_full_stack():  # Older jax: the binding's line only.
      for line in RACY_LINES:
        self.assertIn(line, out)
      self.assertRegex(out, r"\(in the binding at \S*tp/__init__\.py:\d+\)")

  def test_undeclared_targets_race_as_unknown_naming_the_fix(self):
    status, out = run_here(self.root, str(self.racy))
    self.assertEqual(status, 1, out)
    self.assertIn("x a call the analysis knows nothing about", out)
    self.assertIn("[tool.entangle-jax] table in pyproject.toml", out)
    self.assertIn(
      "Undeclared targets in these pairs: tp_counter_get, tp_counter_set", out
    )
    self.assertLess(len(out.splitlines()), 40, out)  # One bounded screen.
    (pairs,) = re.findall(r"1 with races, (\d+) pairs", out)
    self.assertGreater(int(pairs), 100)  # Every unordered pair of them.
    self.assert_names_the_programs_lines(out)

  def test_declared_targets_leave_exactly_the_twelve_hazards(self):
    status, out = run_here(self.declared, str(self.racy))
    self.assertEqual(status, 1, out)
    self.assertIn("1 with races, 12 pairs.", out)
    self.assertNotIn("Undeclared targets", out)  # Control: both declared.
    self.assertIn("12 x the same object, and nothing orders them", out)
    self.assertIn("(12 pairs on these lines)", out)
    self.assertIn("`tp_counter_get` (read, object operand 0; from", out)
    self.assert_names_the_programs_lines(out)

  def test_the_fixed_program_passes_with_and_without_declarations(self):
    for root in (self.root, self.declared):
      status, out = run_here(root, str(self.fixed))
      self.assertEqual(status, 0, out)
      self.assertIn("(1 with native calls): 0 with races, 0 pairs.", out)
    self.assertEqual(self.fixed_wrong, [0] * 5)

  def test_the_plugin_fails_the_racy_test_and_passes_the_fixed(self):
    (self.root / "test_program.py").write_text(TESTS)
    # The dump the run keeps (it races) in a folder removed after the test,
    # not on /dev/shm, where the plugin's dump goes without a TMPDIR.
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    try:
      result = pytest_run(
        self.root, "--entangle-races=fail", "test_program.py", TMPDIR=tmp
      )
    finally:
      (self.root / "test_program.py").unlink()
    out = result.stdout
    self.assertEqual(result.returncode, 1, out + result.stderr)
    self.assertIn("1 failed, 1 passed", out)
    self.assertIn("FAILED test_program.py::test_racy", out)
    self.assertIn("1 with races", out)
    self.assert_names_the_programs_lines(out)

  def test_race_check_fails_the_racy_absltest_and_passes_the_fixed(self):
    (self.root / "program_test.py").write_text(ABSLTEST)
    try:
      result = preloaded_child.run(
        ["program_test.py"],
        timeout=300,
        env=test_util.child_env(),
        cwd=self.root,
      )
    finally:
      (self.root / "program_test.py").unlink()
    out = result.stderr
    self.assertEqual(result.returncode, 1, out)
    self.assertIn("FAIL: test_racy", out)
    self.assertNotIn("FAIL: test_fixed", out)
    self.assertNotIn("ERROR: test_fixed", out)
    self.assertIn("RaceCheckError", out)
    self.assertIn("FAILED (failures=1)", out)
    self.assert_names_the_programs_lines(out)


if __name__ == "__main__":
  absltest.main()
