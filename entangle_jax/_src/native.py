"""Loads entangle's extension and registers its FFI handler with XLA; and
how any of the package's extensions is loaded and registered (the example
store's too). Loading imports no JAX; registering does."""

from __future__ import annotations

import importlib
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

REBUILD_HINT = (
  "entangle_jax's compiled extension {module} could not be loaded. Rebuild "
  "it: in a development checkout run `uv sync --reinstall-package "
  "entangle-jax` (or `pip install --no-build-isolation -e .`); otherwise "
  "reinstall the package with `pip install --force-reinstall entangle-jax`."
)


def load_extension(package: str, module: str) -> types.ModuleType:
  """Imports extension `module` of `package`, raising an ImportError that
  says how to rebuild it."""
  try:
    return importlib.import_module(f"{package}.{module}")
  except ImportError as err:
    hint = REBUILD_HINT.format(module=module)
    raise ImportError(f"{hint} (cause: {err})") from err


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
