"""The build backend keeps an editable build's meson and ninja beside it.

tools/build_backend/entangle_jax_build.py copies meson and ninja into
BUILD/build-tools when they lie outside the environment being installed
into (pip's isolated build environment, deleted after the install), so
that the editable loader's rebuilds on import find them. Here "outside" is
made by running the backend's step in the base interpreter of this
environment, with this environment's packages on PYTHONPATH: they are
outside that interpreter's sys.prefix, as pip's overlay is. The launcher
it writes must then run meson with nothing on PYTHONPATH (the base
interpreter has no meson of its own). The control runs the same step in
this environment, which holds both: nothing is copied.
"""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BACKEND = ROOT / "tools" / "build_backend"

KEEP = """
import json, os, pathlib, sys
sys.path.insert(0, sys.argv[1])
import entangle_jax_build as backend
tools = pathlib.Path(sys.argv[2])
backend._keep_ninja(tools)
backend._keep_meson(tools)
print(json.dumps({k: os.environ.get(k) for k in ("MESON", "NINJA")}))
"""


def run_keep(python: str, tools: pathlib.Path, pythonpath: str | None):
  env = {k: v for k, v in os.environ.items() if k not in ("MESON", "NINJA")}
  env.pop("PYTHONPATH", None)
  if pythonpath:
    env["PYTHONPATH"] = pythonpath
  done = subprocess.run(
    [python, "-c", KEEP, str(BACKEND), str(tools)],
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
    check=True,
  )
  return json.loads(done.stdout.splitlines()[-1])


def site_packages_of(module: str) -> str:
  """The folder `module` (a package) is imported from."""
  spec = importlib.util.find_spec(module)
  assert spec is not None and spec.origin is not None, module
  return str(pathlib.Path(spec.origin).parents[1])


@unittest.skipUnless(
  shutil.which("ninja") and sys.prefix != sys.base_prefix,
  "needs ninja and a virtual environment over a base interpreter",
)
class KeepBuildToolsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    try:
      import mesonbuild  # noqa: F401
      import mesonpy  # noqa: F401
    except ImportError:
      self.skipTest("meson-python is not installed here")
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    self.tools = pathlib.Path(folder.name)

  def test_tools_outside_the_environment_are_copied(self):
    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    if base is None:
      self.skipTest("no base interpreter found")
    probe = subprocess.run(
      [base, "-c", "import mesonbuild"], capture_output=True, check=False
    )
    if probe.returncode == 0:
      self.skipTest(f"{base} has a meson of its own")
    paths = {site_packages_of("mesonbuild"), site_packages_of("mesonpy")}
    settings = run_keep(base, self.tools, os.pathsep.join(sorted(paths)))
    self.assertEqual(settings["NINJA"], str(self.tools / "ninja"))
    self.assertEqual(settings["MESON"], str(self.tools / "meson.py"))
    self.assertTrue((self.tools / "mesonbuild" / "mesonmain.py").is_file())
    # The copies run by themselves: no PYTHONPATH, no environment's meson.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    meson = subprocess.run(
      [base, str(self.tools / "meson.py"), "--version"],
      env=env,
      capture_output=True,
      text=True,
      check=True,
    )
    import mesonbuild.coredata

    self.assertEqual(meson.stdout.strip(), mesonbuild.coredata.version)
    ninja = subprocess.run(
      [self.tools / "ninja", "--version"], capture_output=True, check=True
    )
    self.assertTrue(ninja.stdout.strip())

  def test_tools_inside_the_environment_are_left(self):
    """The control: this environment holds meson, and ninja on PATH is its
    own when its bin folder comes first (as under `uv run`)."""
    if not shutil.which("ninja", path=str(pathlib.Path(sys.executable).parent)):
      self.skipTest("this environment has no ninja of its own")
    os_path = os.environ.get("PATH", "")
    bin_first = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os_path}"
    with unittest.mock.patch.dict(os.environ, {"PATH": bin_first}):
      settings = run_keep(sys.executable, self.tools, None)
    self.assertEqual(settings, {"MESON": None, "NINJA": None})
    self.assertEqual(list(self.tools.iterdir()), [])


if __name__ == "__main__":
  absltest.main()
