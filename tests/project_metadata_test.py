"""The version and pins have one source of truth each, and agree with it."""

import json
import pathlib
import re
import tomllib

from absl.testing import absltest

import entangle_jax

ROOT = pathlib.Path(__file__).resolve().parent.parent


class ProjectMetadataTest(absltest.TestCase):
  def test_module_bazel_version_is_the_version_file(self):
    version = (ROOT / "VERSION").read_text().strip()
    module = (ROOT / "MODULE.bazel").read_text()
    match = re.search(r'^\s*version = "([^"]+)"', module, re.MULTILINE)
    assert match is not None
    self.assertEqual(match.group(1), version)

  def test_package_version_is_the_version_file(self):
    version = (ROOT / "VERSION").read_text().strip()
    self.assertEqual(entangle_jax.__version__, version)

  def test_oldest_jax_is_the_ffi_header_pin(self):
    # Compiling against the oldest supported jaxlib's headers is what makes
    # the extension load in every supported jaxlib.
    pin = json.loads((ROOT / "tools" / "xla_ffi_pin.json").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    self.assertIn(f"jax>={pin['jaxlib']}", project["dependencies"])


if __name__ == "__main__":
  absltest.main()
