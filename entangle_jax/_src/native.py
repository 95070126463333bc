"""Loads entangle's extension and registers its FFI handler with XLA; and
how any of the package's extensions is loaded and registered (the example
store's too). Loading imports no JAX; registering does."""

from __future__ import annotations

import importlib
import importlib.machinery
import pathlib
import sys
import types
from collections.abc import Iterable, Mapping

from entangle_jax._src.targets import platforms
from entangle_jax._src.targets.names import ENTANGLE_TARGET

ENTANGLE_PLATFORMS = tuple(
  p.ffi_name for p in platforms.PLATFORMS if p.ffi_name is not None
)
"""The platform names entangle's FFI handler is registered under
(`platforms.Platform.ffi_name`): those where entangle lowers to its FFI
custom call."""

# Each handler the extension's `registrations()` table names, by target.
_TARGETS = {"entangle": ENTANGLE_TARGET}


def checkout_import_advice(package: pathlib.Path) -> str:
  """What to do when `package`, a source checkout's unbuilt entangle_jax/,
  was imported: one course. An entangle_jax installed elsewhere on sys.path
  is hidden by the current folder, so run with -P; with none, install the
  checkout editable, with this interpreter's pip (an editable install's
  import hook then answers the import from any folder, this one too)."""
  checkout = package.parent
  elsewhere = [
    p for p in sys.path if p and pathlib.Path(p).resolve() != checkout.resolve()
  ]
  installed = importlib.machinery.PathFinder.find_spec(
    "entangle_jax", elsewhere
  )
  said = (
    f"entangle_jax was imported from its source checkout ({package}), which "
    "holds no build of it: Python puts the current folder first on sys.path."
  )
  if installed is not None and installed.origin is not None:
    return (
      f"{said} The installed package ({pathlib.Path(installed.origin).parent})"
      " is behind it: run Python with -P (`python -P -m entangle_jax.demo`)."
    )
  return (
    f"{said} No built entangle_jax is installed: install the checkout "
    f"editable with `{sys.executable} -m pip install -e {checkout}` (pip "
    "fetches the build tools itself; a C++17 compiler is needed), then "
    "import it from any folder."
  )


def rebuild_hint(module: str) -> str:
  """What to run when extension `module` cannot be loaded: one course. A
  package imported from a source checkout (an editable install: the
  checkout holds the build's template `_version.py.in`) is installed again
  editable from that checkout with this interpreter's pip, which fetches
  the build tools itself; an installed one is reinstalled."""
  package = pathlib.Path(__file__).resolve().parents[1]
  said = f"entangle_jax's compiled extension {module} could not be loaded."
  if (package / "_version.py.in").is_file():
    return (
      f"{said} Install the checkout again: `{sys.executable} -m pip install "
      f"-e {package.parent}` (a C++17 compiler is needed)."
    )
  return (
    f"{said} Reinstall the package: `{sys.executable} -m pip install "
    "--force-reinstall entangle-jax`."
  )


def load_extension(package: str, module: str) -> types.ModuleType:
  """Imports extension `module` of `package`, raising an ImportError that
  says how to rebuild it."""
  try:
    return importlib.import_module(f"{package}.{module}")
  except ImportError as err:
    raise ImportError(f"{rebuild_hint(module)} (cause: {err})") from err


def register_handlers(
  extension: types.ModuleType,
  targets: Mapping[str, str],
  platforms: Iterable[str],
) -> None:
  """Registers every handler of `extension`'s `registrations()` table as
  the target `targets` names for it, on each of `platforms`."""
  import jax

  platforms = tuple(platforms)
  for name, handler in extension.registrations().items():
    for platform in platforms:
      jax.ffi.register_ffi_target(targets[name], handler, platform=platform)


def load() -> types.ModuleType:
  """Imports entangle's extension (`load_extension`)."""
  return load_extension("entangle_jax._src", "_entangle_ffi")


def register(extension: types.ModuleType) -> None:
  """Registers entangle's handler for every platform entangle runs on."""
  register_handlers(extension, _TARGETS, ENTANGLE_PLATFORMS)
