"""The version and pins have one source of truth each, and agree with it."""

import json
import pathlib
import re
import tomllib

from absl.testing import absltest

import entangle_jax

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
  return tomllib.loads((ROOT / "pyproject.toml").read_text())


class ProjectMetadataTest(absltest.TestCase):
  def test_version_is_static(self):
    # uv reads a static version without building the package; a dynamic one
    # makes `uv sync` build it in the still empty venv, where mesonpy is
    # missing (no build isolation).
    project = _pyproject()["project"]
    self.assertNotIn("version", project.get("dynamic", []))
    self.assertIsInstance(project["version"], str)

  def test_module_bazel_version_is_the_project_version(self):
    version = _pyproject()["project"]["version"]
    module = (ROOT / "MODULE.bazel").read_text()
    match = re.search(r'^\s*version = "([^"]+)"', module, re.MULTILINE)
    assert match is not None
    self.assertEqual(match.group(1), version)

  def test_package_version_is_the_project_version(self):
    version = _pyproject()["project"]["version"]
    self.assertEqual(entangle_jax.__version__, version)

  def test_oldest_jax_is_the_ffi_header_pin(self):
    # Compiling against the oldest supported jaxlib's headers is what makes
    # the extension load in every supported jaxlib.
    pin = json.loads((ROOT / "tools" / "xla_ffi_pin.json").read_text())
    project = _pyproject()["project"]
    self.assertIn(f"jax>={pin['jaxlib']}", project["dependencies"])

  def test_test_group_installs_the_export_extra(self):
    # export_test needs what `entangle-jax[export]` installs; the test group
    # repeats those requirements (see pyproject.toml), so they must agree.
    pyproject = _pyproject()
    extra = pyproject["project"]["optional-dependencies"]["export"]
    self.assertNotEmpty(extra)
    for requirement in extra:
      self.assertIn(requirement, pyproject["dependency-groups"]["test"])


if __name__ == "__main__":
  absltest.main()
