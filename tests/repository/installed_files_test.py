"""An installed entangle_jax holds exactly the documented files.

Each install route CI checks (`pip install .`, the uv wheel, `uv add`, the
Bazel wheel) runs this against the package it installed (tools/ci_lib.sh,
the installed-package suite). In a checkout, where entangle_jax is imported
from the source tree, there is nothing installed to compare, and it skips.
"""

import importlib.metadata
import pathlib
import sys
import sysconfig
import tomllib

from absl.testing import absltest

import entangle_jax
from tests.repository import wheel_test

# Built only where meson finds a CUDA compiler (meson_options.txt, `cuda` is
# `auto`), so an installed package may or may not have it.
OPTIONAL = {
  "entangle_jax/testing/_example_resource_cuda_ffi"
  + sysconfig.get_config_var("EXT_SUFFIX")
}


def installed() -> bool:
  return "site-packages" in pathlib.Path(entangle_jax.__file__).parts


def installed_files() -> set[str]:
  """The package's files as its installed RECORD lists them, without the
  metadata and the bytecode an installer may add."""
  files = importlib.metadata.files("entangle-jax") or []
  return {
    str(f)
    for f in files
    if ".dist-info/" not in str(f) and "__pycache__" not in str(f)
  }


@absltest.skipUnless(installed(), "entangle_jax is not an installed package")
class InstalledFilesTest(absltest.TestCase):
  def test_the_documented_files_are_installed(self):
    self.assertEqual(
      installed_files() - OPTIONAL, wheel_test.documented_files()
    )

  def test_the_licence_texts_are_installed(self):
    # PEP 639: pyproject.toml's license-files, under the installed
    # .dist-info/licenses/, as the repository has them (issue 80: the
    # wheel carried none, though it holds compiled pybind11).
    dist = importlib.metadata.distribution("entangle-jax")
    project = tomllib.loads((wheel_test.ROOT / "pyproject.toml").read_text())
    listed = project["project"]["license-files"]
    self.assertNotEmpty(listed)
    installed = {
      str(f).split(".dist-info/licenses/", 1)[1]: f
      for f in dist.files or []
      if ".dist-info/licenses/" in str(f)
    }
    self.assertEqual(set(installed), set(listed))
    for name in listed:
      self.assertEqual(
        installed[name].read_text(),
        (wheel_test.ROOT / name).read_text(),
        name,
      )
    self.assertEqual(dist.metadata["License-Expression"], "Apache-2.0")

  def test_the_files_exist_where_python_imports_them(self):
    root = pathlib.Path(entangle_jax.__file__).parent.parent
    missing = [f for f in installed_files() if not (root / f).is_file()]
    self.assertEqual(missing, [], f"{sys.executable}: RECORD lists them")


if __name__ == "__main__":
  absltest.main()
