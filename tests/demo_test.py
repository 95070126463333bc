"""`python -m entangle_jax.demo` prints the table with the right verdicts."""

import contextlib
import io

from absl.testing import absltest

from entangle_jax import demo
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)


class DemoTest(absltest.TestCase):
  def test_table(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      self.assertEqual(demo.main(["--runs", "20"]), 0)
    rows = {
      line.split("  ")[0]: line
      for line in out.getvalue().splitlines()
      if "/ 20" in line
    }
    self.assertCountEqual(
      rows, ["no ordering", "optimization_barrier", "entangle"]
    )
    self.assertRegex(rows["no ordering"], r"\b([1-9]\d*) / 20 +not ordered$")
    self.assertRegex(rows["optimization_barrier"], r"not ordered$")
    self.assertRegex(rows["entangle"], r"\b0 / 20 +ordered$")

  def test_rejects_zero_runs(self):
    with (
      self.assertRaises(SystemExit),
      contextlib.redirect_stderr(io.StringIO()),
    ):
      demo.main(["--runs", "0"])


if __name__ == "__main__":
  absltest.main()
