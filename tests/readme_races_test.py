"""The README's "What races reports" example prints what the README shows."""

import pathlib
import re
import subprocess
import sys
import tempfile

import jax
from absl.testing import absltest

from tests import test_util

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BEGIN = "<!-- begin: races example output -->\n```\n"
END = "```\n<!-- end: races example output -->"
RECORDED_WITH = "0.10.2"  # "captured with jax 0.10.2" in the README


class ReadmeRacesExampleTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not README.exists():
      # CI also runs a copy of tests/ against the installed package, away
      # from the checkout and its README.
      self.skipTest("no README.md: tests/ runs from a copy of the checkout")
    readme = README.read_text(encoding="utf-8")
    section = readme.split("### What races reports\n", 1)[1]
    section = section.split("\n### ")[0]
    (self.example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    start, end = section.index(BEGIN) + len(BEGIN), section.index(END)
    self.recorded = section[start:end]

  def test_the_example_prints_the_recorded_races(self):
    with tempfile.TemporaryDirectory() as folder:
      (pathlib.Path(folder) / "my_test.py").write_text(self.example)
      run = subprocess.run(
        [sys.executable, "my_test.py"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=test_util.child_env(),
        timeout=300,
        check=False,
      )
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertTrue(run.stdout.startswith("4 pairs of calls may conflict"))
    self.assertEqual(run.stdout.count("(writes any resource)"), 4)
    if jax.__version__ == RECORDED_WITH:
      # Older XLA records only the innermost frame, so its lines differ.
      self.assertEqual(run.stdout, self.recorded)
    # The control: without the stale write there is nothing to report.
    stale = "  write_slot(token, 3.0)  # a stale token, outside the Resource\n"
    self.assertIn(stale, self.example)
    namespace: dict = {}
    exec(self.example.replace(stale, "").replace("print(", "("), namespace)
    self.assertEqual(namespace["races"](namespace["compiled"]), [])


if __name__ == "__main__":
  absltest.main()
