"""The sdist builds with no package index when ENTANGLE_JAX_FFI_HEADERS
names the XLA FFI headers (docs/native_build.md, "Building offline").

Building the sdist configures meson, which is where the headers are
obtained (tools/xla_ffi_headers.py): that step is what needs an index
otherwise, to download the pinned jaxlib wheel. The build runs the
project's PEP 517 backend in this interpreter (its build tools are this
environment's: nothing to fetch), with pip unable to reach any index
(PIP_NO_INDEX, no configuration file, so no find-links either), uv
offline, and an empty cache, so no cached jaxlib wheel can stand in. The
headers are written first from the usual places (an installed jaxlib of the
pinned version, or the cache a previous build left). The control builds
the same way without the setting, and fails naming it.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FFI_HEADERS_TOOL = ROOT / "tools" / "xla_ffi_headers.py"
BACKEND = ROOT / "tools" / "build_backend"

BUILD_SDIST = """
import sys
sys.path.insert(0, sys.argv[1])
import entangle_jax_build
print(entangle_jax_build.build_sdist(sys.argv[2]))
"""


def offline_env(cache: pathlib.Path, headers: pathlib.Path | None) -> dict:
  env = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("PIP_", "UV_")) and k != "ENTANGLE_JAX_FFI_HEADERS"
  }
  env.update(
    PIP_NO_INDEX="1",
    PIP_CONFIG_FILE=os.devnull,
    UV_OFFLINE="1",
    ENTANGLE_JAX_CACHE=str(cache),
  )
  if headers is not None:
    env["ENTANGLE_JAX_FFI_HEADERS"] = str(headers)
  return env


def pinned_jaxlib_is_installed() -> bool:
  import importlib.metadata

  pin = json.loads((ROOT / "tools" / "xla_ffi_pin.json").read_text())
  try:
    return importlib.metadata.version("jaxlib") == pin["jaxlib"]
  except importlib.metadata.PackageNotFoundError:
    return False


@unittest.skipUnless(
  (ROOT / ".git").exists() and shutil.which("git"),
  "builds the sdist from a git checkout (meson dist archives HEAD)",
)
class OfflineSdistTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if pinned_jaxlib_is_installed():
      self.skipTest("the pinned jaxlib is installed: it would give headers")
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.scratch = pathlib.Path(scratch.name)
    self.empty_cache = self.scratch / "empty-cache"
    self.empty_cache.mkdir()

  def build(self, headers: pathlib.Path | None):
    out = self.scratch / ("with" if headers else "without")
    out.mkdir()
    return subprocess.run(
      [sys.executable, "-c", BUILD_SDIST, str(BACKEND), str(out)],
      cwd=ROOT,
      env=offline_env(self.empty_cache, headers),
      capture_output=True,
      text=True,
      timeout=300,
    ), out

  def test_builds_from_the_named_headers(self):
    headers = self.scratch / "headers"
    subprocess.run(
      [sys.executable, str(FFI_HEADERS_TOOL), "fetch", str(headers)],
      check=True,
    )
    done, out = self.build(headers)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    (sdist,) = out.glob("entangle_jax-*.tar.gz")
    self.assertEqual(sdist.name, done.stdout.split()[-1])
    # Nothing was downloaded into the cache the build was given.
    self.assertEqual(list(self.empty_cache.rglob("*.whl")), [])

  def test_without_them_it_fails_and_names_the_setting(self):
    done, out = self.build(None)
    self.assertNotEqual(done.returncode, 0)
    output = done.stdout + done.stderr
    self.assertIn("could not download jaxlib==", output)
    self.assertIn("ENTANGLE_JAX_FFI_HEADERS", output)
    self.assertEqual(list(out.glob("*.tar.gz")), [])


if __name__ == "__main__":
  absltest.main()
