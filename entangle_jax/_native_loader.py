"""Loads the compiled extension and registers its FFI targets with XLA."""

from __future__ import annotations

import types

import jax

ENTANGLE_TARGET = "entangle_jax_entangle"
WRITE_SLOT_TARGET = "entangle_jax_write_slot"
READ_SLOT_TARGET = "entangle_jax_read_slot"

# JAX hands custom-call targets to GPU plugins under these platform names.
ENTANGLE_PLATFORMS = ("cpu", "CUDA", "ROCM")

_REBUILD_HINT = (
  "entangle_jax's compiled extension could not be loaded. Rebuild it: in a "
  "development checkout run `uv sync --reinstall-package entangle-jax` (or "
  "`pip install --no-build-isolation -e .`); otherwise reinstall the package "
  "with `pip install --force-reinstall entangle-jax`."
)


def load_native() -> types.ModuleType:
  """Imports the extension, raising an ImportError that says how to rebuild."""
  try:
    from entangle_jax import _native
  except ImportError as err:
    raise ImportError(f"{_REBUILD_HINT} (cause: {err})") from err
  return _native


def load_native_cuda() -> types.ModuleType | None:
  """The CUDA example-resource module, or None when it was not built."""
  try:
    from entangle_jax import _native_cuda
  except ImportError:
    return None
  return _native_cuda


def register_targets(native: types.ModuleType) -> None:
  """Registers every handler of `native` with XLA's FFI registry."""
  entangle = native.entangle_handler()
  for platform in ENTANGLE_PLATFORMS:
    jax.ffi.register_ffi_target(ENTANGLE_TARGET, entangle, platform=platform)
  jax.ffi.register_ffi_target(
    WRITE_SLOT_TARGET, native.write_slot_host_handler(), platform="cpu"
  )
  jax.ffi.register_ffi_target(
    READ_SLOT_TARGET, native.read_slot_host_handler(), platform="cpu"
  )
  cuda = load_native_cuda()
  if cuda is not None:
    jax.ffi.register_ffi_target(
      WRITE_SLOT_TARGET, cuda.write_slot_cuda_handler(), platform="CUDA"
    )
    jax.ffi.register_ffi_target(
      READ_SLOT_TARGET, cuda.read_slot_cuda_handler(), platform="CUDA"
    )
