"""`python -m entangle_jax.demo` prints the table with the right verdicts."""

import contextlib
import io

from absl.testing import absltest

from entangle_jax import demo


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
    # The verdicts come from the compiled module and are certain, as is
    # entangle's count. How many of 20 unordered runs go wrong is up to the
    # scheduler (hazard_test shows that they do); here only its form.
    self.assertRegex(rows["no ordering"], r"\b\d+ / 20 +not ordered$")
    self.assertRegex(rows["optimization_barrier"], r"\b\d+ / 20 +not ordered$")
    self.assertRegex(rows["entangle"], r"\b0 / 20 +ordered$")

  def test_rejects_zero_runs(self):
    err = io.StringIO()
    with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
      demo.main(["--runs", "0"])
    # The usage names the command a user runs, not __main__.py.
    self.assertStartsWith(err.getvalue(), "usage: python -m entangle_jax.demo")
    self.assertIn("--runs must be at least 1", err.getvalue())


if __name__ == "__main__":
  absltest.main()
