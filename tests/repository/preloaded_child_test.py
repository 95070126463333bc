"""tests/preloaded_child.py: a child forked from the preloaded server runs
as a fresh interpreter would (its arguments, folder, environment, output,
exit code, exit handlers and threads, a timeout), each compared with a
fresh interpreter running the same; and the server is what ran it (jax
already imported), except where the environment asks for a fresh one."""

import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest

from tests import preloaded_child, test_util

# What a child saw, one line each; the first says whether jax was
# imported before the program's first line (only a forked child has it).
_REPORT = textwrap.dedent(
  """
  import os, sys
  print("jax before:", "jax" in sys.modules)
  print("argv:", sys.argv[1:])
  print("cwd:", os.getcwd())
  print("variable:", os.environ.get("PRELOADED_CHILD_TEST"))
  print("to stderr", file=sys.stderr)
  import atexit, threading, time
  atexit.register(lambda: print("atexit ran", flush=True))
  def late():
    time.sleep(0.2)
    print("thread ended", flush=True)
  threading.Thread(target=late).start()
  raise SystemExit(int(sys.argv[1]))
  """
)


def _fresh(argv, env, cwd=None, timeout=60):
  return subprocess.run(
    [sys.executable, *argv],
    capture_output=True,
    text=True,
    env=env,
    cwd=cwd,
    timeout=timeout,
  )


def _without_first_line(text: str) -> list[str]:
  return text.splitlines()[1:]


class PreloadedChildTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(tempfile.mkdtemp())
    # The server on, whatever the run's environment says.
    self.enter_context(mock.patch.dict(os.environ))
    os.environ.pop(preloaded_child.OFF, None)
    self.env = dict(test_util.child_env(), PRELOADED_CHILD_TEST="seen")

  def test_a_forked_child_runs_as_a_fresh_one_does(self):
    argv = ["-c", _REPORT, "3", "more"]
    forked = preloaded_child.run(
      argv, env=self.env, cwd=self.folder, timeout=60
    )
    fresh = _fresh(argv, self.env, cwd=self.folder)
    self.assertEqual(forked.returncode, 3, forked.stderr)
    self.assertEqual(forked.returncode, fresh.returncode)
    self.assertEqual(forked.stderr, fresh.stderr)
    self.assertEqual(
      _without_first_line(forked.stdout), _without_first_line(fresh.stdout)
    )
    self.assertIn("atexit ran", forked.stdout)
    self.assertIn("thread ended", forked.stdout)
    # The control: only the forked one had jax imported already.
    self.assertIn("jax before: True", forked.stdout)
    self.assertIn("jax before: False", fresh.stdout)

  def test_switched_off_or_another_jax_setting_gets_a_fresh_one(self):
    argv = ["-c", _REPORT, "0"]
    for env in (
      dict(self.env, **{preloaded_child.OFF: "1"}),
      dict(self.env, JAX_ENABLE_X64="1"),
    ):
      run = preloaded_child.run(argv, env=env, cwd=self.folder, timeout=60)
      self.assertEqual(run.returncode, 0, run.stderr)
      self.assertIn("jax before: False", run.stdout)
    asked = preloaded_child.run(
      argv, env=self.env, cwd=self.folder, timeout=60, fresh=True
    )
    self.assertIn("jax before: False", asked.stdout)

  def test_xla_flags_reach_the_childs_backend(self):
    # The flag the pytest plugin sets: each child's modules land in the
    # folder its own XLA_FLAGS names (read when its backend starts).
    source = "import jax; jax.jit(lambda x: x + 1)(1.0)"
    dumped = []
    for name in ("first", "second"):
      folder = self.folder / name
      env = dict(self.env, XLA_FLAGS=f"--xla_dump_to={folder}")
      run = preloaded_child.run(["-c", source], env=env, timeout=60)
      self.assertEqual(run.returncode, 0, run.stderr)
      dumped.append(any("jit__lambda" in f.name for f in folder.iterdir()))
    self.assertEqual(dumped, [True, True])

  def test_a_module_and_a_script_with_its_folder_on_the_path(self):
    (self.folder / "sibling.py").write_text("WORD = 'sibling'\n")
    script = self.folder / "main.py"
    script.write_text(
      "import sys, sibling\nprint(sibling.WORD, sys.argv)\n"
      "raise SystemExit('a message')\n"
    )
    outputs = []
    for argv in ([str(script), "x"], ["-m", "platform"]):
      forked = preloaded_child.run(argv, env=self.env, timeout=60)
      fresh = _fresh(argv, self.env)
      self.assertEqual(
        (forked.returncode, forked.stdout, forked.stderr),
        (fresh.returncode, fresh.stdout, fresh.stderr),
        argv,
      )
      outputs.append(forked)
    self.assertEqual(
      (outputs[0].returncode, outputs[0].stderr), (1, "a message\n")
    )
    self.assertEqual(outputs[0].stdout, f"sibling [{str(script)!r}, 'x']\n")

  def test_an_uncaught_error_prints_its_traceback_and_exits_1(self):
    run = preloaded_child.run(
      ["-c", "raise ValueError('bad input')"], env=self.env, timeout=60
    )
    self.assertEqual(run.returncode, 1)
    self.assertIn("ValueError: bad input", run.stderr)

  def test_a_timeout_kills_the_child_and_the_server_goes_on(self):
    with self.assertRaises(subprocess.TimeoutExpired):
      preloaded_child.run(
        ["-c", "print('started', flush=True); import time; time.sleep(60)"],
        env=self.env,
        timeout=2,
      )
    after = preloaded_child.run(
      ["-c", "print('next')"], env=self.env, timeout=60
    )
    self.assertEqual((after.returncode, after.stdout), (0, "next\n"))

  def test_a_server_that_ended_gives_fresh_children(self):
    preloaded_child.run(["-c", "pass"], env=self.env, timeout=60)
    server = preloaded_child._server["process"]
    server.kill()
    server.wait()
    # The next test's run starts a server anew.
    self.addCleanup(preloaded_child._server.clear)
    run = preloaded_child.run(["-c", _REPORT, "0"], env=self.env, timeout=60)
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertIn("jax before: False", run.stdout)


if __name__ == "__main__":
  absltest.main()
