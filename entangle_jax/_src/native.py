"""Loads entangle's extension and registers its FFI handler with XLA."""

from __future__ import annotations

import types

import jax

ENTANGLE_TARGET = "entangle_jax_entangle"
"""The custom-call target name of entangle's no-op handler."""

# JAX hands custom-call targets to GPU plugins under these platform names
# (lowercase "cuda" would stay queued and never reach a plugin).
ENTANGLE_PLATFORMS = ("cpu", "CUDA", "ROCM")

# Each handler the extension's `registrations()` table names, by target.
_TARGETS = {"entangle": ENTANGLE_TARGET}

REBUILD_HINT = (
  "entangle_jax's compiled extension {module} could not be loaded. Rebuild "
  "it: in a development checkout run `uv sync --reinstall-package "
  "entangle-jax` (or `pip install --no-build-isolation -e .`); otherwise "
  "reinstall the package with `pip install --force-reinstall entangle-jax`."
)


def load() -> types.ModuleType:
  """Imports entangle's extension, raising an ImportError that says how to
  rebuild it."""
  try:
    from entangle_jax._src import _entangle_ffi
  except ImportError as err:
    hint = REBUILD_HINT.format(module="_entangle_ffi")
    raise ImportError(f"{hint} (cause: {err})") from err
  return _entangle_ffi


def register(extension: types.ModuleType) -> None:
  """Registers every handler of `extension`'s `registrations()` table, for
  every platform entangle runs on."""
  for name, handler in extension.registrations().items():
    for platform in ENTANGLE_PLATFORMS:
      jax.ffi.register_ffi_target(_TARGETS[name], handler, platform=platform)
