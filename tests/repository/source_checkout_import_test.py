"""Importing entangle_jax from a checkout's own folder names the mistake.

README Install's `pip install .` runs in the checkout's root, and
`python -m entangle_jax.demo` run there imported the source folder (the
current folder comes first on sys.path), which has no `_version.py` and no
extension: it failed with ``No module named 'entangle_jax._version'``. The
import now says what happened and one thing to do: `python -P` when a built
entangle_jax is installed elsewhere on sys.path, else install the checkout
editable with this interpreter's pip (issue 80: it used to offer both, and
its `pip install -e .` left a build that failed on every import).

Each case imports a copy of the package's source in a fresh interpreter
run with ``-S`` (no site-packages, so no installed or editable
entangle_jax can answer the import: the copy in the current folder must).
The package's own import needs no JAX, which is why that works.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

import entangle_jax

PACKAGE = pathlib.Path(entangle_jax.__file__).parent


def import_in(
  folder: pathlib.Path, installed: pathlib.Path | None = None
) -> subprocess.CompletedProcess:
  """`import entangle_jax` in `folder`, with `installed` (a folder holding
  a built entangle_jax) on sys.path after it when given."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  if installed is not None:
    env["PYTHONPATH"] = str(installed)
  return subprocess.run(
    [sys.executable, "-S", "-c", "import entangle_jax"],
    cwd=folder,
    capture_output=True,
    text=True,
    timeout=120,
    env=env,
  )


class SourceCheckoutImportTest(absltest.TestCase):
  def copy_of_the_source(self, *, built: bool) -> pathlib.Path:
    """The package's Python files in a checkout-like folder: with the
    template the build reads, and `_version.py` only when `built`."""
    root = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, root)
    copy = root / "entangle_jax"
    shutil.copytree(
      PACKAGE,
      copy,
      ignore=shutil.ignore_patterns("_version.py", "*.so", "__pycache__"),
    )
    (copy / "_version.py.in").write_text("__version__ = '@VERSION@'\n")
    if built:
      (copy / "_version.py").write_text("__version__ = '0.0.0'\n")
    return root

  def test_the_source_folder_with_nothing_installed_says_to_install_it(self):
    root = self.copy_of_the_source(built=False)
    done = import_in(root)
    self.assertNotEqual(done.returncode, 0)
    self.assertIn("imported from its source checkout", done.stderr)
    self.assertIn(f"{sys.executable} -m pip install -e {root}", done.stderr)
    self.assertNotIn("python -P", done.stderr)
    self.assertNotIn("No module named", done.stderr)

  def test_the_source_folder_before_an_install_says_python_p(self):
    """The control of the case above: the same folder, with a built copy
    installed elsewhere on sys.path, gets the other course, alone."""
    installed = self.copy_of_the_source(built=True)
    (installed / "entangle_jax" / "_version.py.in").unlink()
    done = import_in(self.copy_of_the_source(built=False), installed)
    self.assertNotEqual(done.returncode, 0)
    self.assertIn("imported from its source checkout", done.stderr)
    self.assertIn("python -P -m entangle_jax.demo", done.stderr)
    self.assertIn(str(installed / "entangle_jax"), done.stderr)
    self.assertNotIn("pip install", done.stderr)

  def test_a_copy_with_its_version_goes_past_it(self):
    """The control: the same copy with the file the build writes is not
    taken for a checkout; it stops later, at the extension it lacks, with
    that extension's own message."""
    done = import_in(self.copy_of_the_source(built=True))
    self.assertNotEqual(done.returncode, 0)
    self.assertIn("compiled extension _entangle_ffi", done.stderr)
    # A copy in a checkout-like folder: its one course is installing that
    # checkout editable again.
    self.assertIn("-m pip install -e", done.stderr)
    self.assertNotIn("--force-reinstall", done.stderr)
    self.assertNotIn("imported from its source checkout", done.stderr)

  def test_another_missing_module_is_not_taken_for_a_checkout(self):
    """Only a folder with the build's template is a checkout."""
    root = self.copy_of_the_source(built=False)
    (root / "entangle_jax" / "_version.py.in").unlink()
    done = import_in(root)
    self.assertIn("No module named 'entangle_jax._version'", done.stderr)


if __name__ == "__main__":
  absltest.main()
