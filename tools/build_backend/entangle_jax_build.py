"""entangle-jax's build backend: meson-python's, with an editable install
whose build folder keeps working after the build environment is gone.

pyproject.toml names this module as the PEP 517 backend (`backend-path`).
Every hook is meson-python's; `build_editable` first makes the build
folder self-sufficient. An editable install rebuilds on every import: its
loader runs ninja in the build folder, and ninja runs meson (to regenerate
the build after a meson.build or pyproject.toml edit, and to link). Both
are named there by the absolute path they had when the install was built.
pip builds in an isolated environment that it deletes right after, so an
install made by a plain `pip install -e .` would name programs that no
longer exist. For each of meson and ninja that the target environment
(`sys.prefix`) does not hold, a copy goes into BUILD_DIR/build-tools, and
meson-python is told to use the copy (its MESON and NINJA settings), so
the build folder names only files that last as long as it does. (pybind11's
headers are copied by meson.build itself: tools/pybind11_headers.py.)

`uv sync` builds without isolation, in the environment itself: there both
programs are the environment's own, and nothing is copied.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import mesonpy
import mesonpy._tags
from mesonpy import (  # noqa: F401 (the PEP 517 hooks this backend keeps)
  build_sdist,
  build_wheel,
  get_requires_for_build_editable,
  get_requires_for_build_sdist,
  get_requires_for_build_wheel,
)

TOOLS = "build-tools"


def _outside_environment(path: pathlib.Path) -> bool:
  """Whether `path` lies outside the environment being installed into."""
  prefix = pathlib.Path(sys.prefix).resolve()
  return prefix not in path.resolve().parents


def _build_dir(config_settings: dict[str, Any] | None) -> pathlib.Path:
  """The editable build's folder: meson-python's build-dir setting, or its
  default for editable builds (build/ABI_TAG in the source folder)."""
  settings = config_settings or {}
  given = settings.get("build-dir") or settings.get("builddir")
  if isinstance(given, list):
    given = given[-1]
  if given:
    return pathlib.Path(given).absolute()
  return pathlib.Path("build", mesonpy._tags.get_abi_tag()).absolute()


def _keep_ninja(tools: pathlib.Path) -> None:
  """Copies the ninja meson-python would use into `tools` and points
  meson-python at the copy (NINJA), if it lies outside the environment."""
  found = os.environ.get("NINJA") or shutil.which("ninja")
  if not found:
    return  # meson-python reports the missing ninja itself.
  ninja = pathlib.Path(found)
  if not _outside_environment(ninja):
    return
  tools.mkdir(parents=True, exist_ok=True)
  copy = tools / "ninja"
  shutil.copy2(ninja.resolve(), copy)
  # A script (an older ninja package's launcher) would name the deleted
  # environment's Python: only a copy that runs by itself will do.
  probe = subprocess.run([copy, "--version"], capture_output=True, check=False)
  if probe.returncode != 0:
    raise RuntimeError(
      f"the copy of ninja ({ninja}) at {copy} does not run by itself; "
      "install ninja into the environment, or build without isolation"
    )
  os.environ["NINJA"] = str(copy)


def _keep_meson(tools: pathlib.Path) -> None:
  """Copies the mesonbuild package meson-python would run into `tools`, if
  it lies outside the environment, and points meson-python (MESON) at a
  meson.py there that runs it (or the environment's, where nothing was
  copied) with NINJA set to the ninja copied beside it, if any: meson looks
  for ninja again each time it regenerates the build, and the editable
  loader runs it with the importing process's environment, without
  meson-python's NINJA. A MESON already set is left."""
  if os.environ.get("MESON"):
    return
  import mesonbuild

  package = pathlib.Path(mesonbuild.__file__).parent
  ninja = tools / "ninja"
  if not _outside_environment(package) and not ninja.exists():
    return
  tools.mkdir(parents=True, exist_ok=True)
  if _outside_environment(package):
    copy = tools / "mesonbuild"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(
      package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
  # meson-python runs a MESON ending in .py with this interpreter, the
  # environment's, and meson records that command for its later runs; the
  # script's folder comes first on sys.path, so a copied mesonbuild wins.
  launcher = tools / "meson.py"
  launcher.write_text(
    "import os\n"
    "import sys\n"
    "from mesonbuild.mesonmain import main\n"
    f"if os.path.exists({str(ninja)!r}):\n"
    f"  os.environ.setdefault('NINJA', {str(ninja)!r})\n"
    "sys.exit(main())\n"
  )
  os.environ["MESON"] = str(launcher)


def build_editable(
  wheel_directory: str,
  config_settings: dict[str, Any] | None = None,
  metadata_directory: str | None = None,
) -> str:
  """meson-python's editable wheel, its build folder made to outlive the
  build environment (this module's docstring)."""
  tools = _build_dir(config_settings) / TOOLS
  _keep_ninja(tools)
  _keep_meson(tools)
  return mesonpy.build_editable(
    wheel_directory, config_settings, metadata_directory
  )
