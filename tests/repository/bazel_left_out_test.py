"""tools/bazel_left_out.py lists the test files `bazel test //...` leaves
out: CI's locks lane runs them with pytest beside Bazel's suite on the same
Python and jax, so a file it missed would go untested there."""

import contextlib
import io
import pathlib
import tempfile

from absl.testing import absltest

from tests import test_util

bazel_left_out = test_util.development_tool("bazel_left_out")

ROOT = pathlib.Path(__file__).resolve().parents[2]

BUILD = """\
load("@rules_python//python:defs.bzl", "py_test")

_OUTSIDE_BAZEL = [
    "repository/docs_test.py",
    "ways_in/pytest_plugin_test.py",
]

_IN_BAZEL = glob(["**/*_test.py"], exclude = _OUTSIDE_BAZEL)
"""


def run(root: pathlib.Path) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    status = bazel_left_out.main([], root=root)
  return status, out.getvalue(), err.getvalue()


class BazelLeftOutTest(absltest.TestCase):
  def test_reads_the_list_as_written(self):
    self.assertEqual(
      bazel_left_out.left_out(BUILD),
      ["repository/docs_test.py", "ways_in/pytest_plugin_test.py"],
    )

  def test_the_checkouts_list_names_its_test_files(self):
    status, out, err = run(ROOT)
    self.assertEqual(status, 0, err)
    files = out.split()
    # pytest's own runs of the files Bazel skips: the docs' blocks and the
    # plugin's runs are among them (tests/BUILD.bazel says why).
    self.assertIn("tests/repository/docs_test.py", files)
    self.assertIn("tests/ways_in/pytest_plugin_test.py", files)
    for name in files:
      self.assertRegex(name, r"^tests/.+_test\.py$")
      self.assertTrue((ROOT / name).is_file(), name)

  def test_a_missing_file_or_list_is_an_error_naming_it(self):
    with tempfile.TemporaryDirectory() as tmp:
      root = pathlib.Path(tmp)
      (root / "tests" / "repository").mkdir(parents=True)
      (root / "tests" / "repository" / "docs_test.py").write_text("")
      (root / "tests" / "BUILD.bazel").write_text(BUILD)
      status, out, err = run(root)
      self.assertEqual(status, 2)
      self.assertEqual(out, "")
      self.assertIn("tests/ways_in/pytest_plugin_test.py", err)
      self.assertNotIn("docs_test", err)
      # Control: with the file there, both are listed.
      (root / "tests" / "ways_in").mkdir()
      (root / "tests" / "ways_in" / "pytest_plugin_test.py").write_text("")
      status, out, err = run(root)
      self.assertEqual((status, err), (0, ""))
      self.assertEqual(len(out.split()), 2)
      # No list at all, or one that is not of strings.
      (root / "tests" / "BUILD.bazel").write_text("_OTHER = []\n")
      status, _, err = run(root)
      self.assertEqual(status, 2)
      self.assertIn("assigns no _OUTSIDE_BAZEL list", err)
      (root / "tests" / "BUILD.bazel").write_text("_OUTSIDE_BAZEL = [1]\n")
      status, _, err = run(root)
      self.assertEqual(status, 2)
      self.assertIn("not a list of strings", err)


if __name__ == "__main__":
  absltest.main()
