"""FFI targets registered while the sanitizer runs, and their trampolines.

While `install`'s hook is in place, every typed-FFI registration (what
``jax.ffi.register_ffi_target`` and the older ``xla_client`` route do) is
registered with a recording trampoline in place of each stage's handler
(`entangle_jax/testing/_sanitize_ffi`, native/sanitize/). A trampoline
stays registered for the process (XLA cannot unregister a target); with
recording off it only forwards. Registrations it cannot wrap (the untyped
custom-call API, more handlers than trampolines) are registered as they
are and listed in `not_wrapped`.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from entangle_jax._src import access_policy
from entangle_jax._src.targets import platforms, sources
from entangle_jax._src.targets.names import (
  ENTANGLE_TARGET,
  SANITIZER_EXECUTION_TARGET,
  SANITIZER_ITERATION_TARGET,
)
from entangle_jax.testing._sanitize import jax_hooks


@dataclasses.dataclass(frozen=True)
class WrappedTarget:
  """A target whose handlers run through recording trampolines.

  Attributes:
    name: the target name.
    platform: XLA's platform name (``Host`` for CPU, ``CUDA``, ...).
    family: the top-level package that registered it; objects of
      different families are never the same object.
    stages: the FFI stages wrapped, with their trampoline's index.
  """

  name: str
  platform: str
  family: str
  stages: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class NotWrapped:
  """A registration the sanitizer saw but could not wrap, and why."""

  name: str
  platform: str
  reason: str


_lock = threading.Lock()
_by_index: dict[int, WrappedTarget] = {}
_by_name: dict[tuple[str, str], WrappedTarget] = {}
_not_wrapped: list[NotWrapped] = []
_undo: Callable[[], None] | None = None
_native: types.ModuleType | None = None


def native() -> types.ModuleType:
  """The trampolines' extension (loaded on first use).

  Raises:
    ImportError: the extension was not built (rebuild the package).
  """
  global _native
  if _native is None:
    _native = importlib.import_module("entangle_jax.testing._sanitize_ffi")
  return _native


def installed() -> bool:
  """Whether registrations are being wrapped now."""
  return _undo is not None


def install() -> None:
  """Wraps every FFI registration from now on (until `uninstall`)."""
  global _undo
  with _lock:
    if _undo is not None:
      return
    native()
    _undo = jax_hooks.replace(
      jax_hooks.registration_module(), jax_hooks.REGISTER, _make_register
    )


def uninstall() -> None:
  """Registrations go straight to XLA again (the trampolines already
  registered stay, forwarding)."""
  global _undo
  with _lock:
    if _undo is not None:
      _undo()
      _undo = None


def target_of(index: int) -> WrappedTarget | None:
  """The target whose handler trampoline `index` wraps."""
  return _by_index.get(index)


def wrapped(name: str, platform: str) -> WrappedTarget | None:
  """The wrapped target `name` on XLA platform `platform`, if any."""
  return _by_name.get((name, platform))


def not_wrapped() -> list[NotWrapped]:
  """Registrations seen while installed that run unwrapped."""
  return list(_not_wrapped)


def xla_platform(platform: str) -> str:
  """XLA's name for a JAX platform name (``cpu`` -> ``Host``)."""
  names = getattr(jax_hooks.registration_module(), "xla_platform_names", {})
  return names.get(platform, platform)


def _make_register(original: Callable[..., Any]) -> Callable[..., Any]:
  def register_custom_call_target(
    name: str, fn: Any, platform: str = "cpu", api_version: int = 0, *args, **kw
  ) -> Any:
    fn = _wrap(name, fn, xla_platform(platform), api_version)
    return original(name, fn, platform, api_version, *args, **kw)

  return register_custom_call_target


_execution_registered = False


def execution_target() -> str:
  """The target of the op that hands a host callback its execution's id
  and its place (`sites`), registered with XLA on first use for the
  platforms that have it (`platforms.Platform.execution_op`: the CPU;
  native/sanitize's ``Execution``); its name is
  `names.SANITIZER_EXECUTION_TARGET`."""
  global _execution_registered
  with _lock:
    if not _execution_registered:
      import jax

      for row in platforms.PLATFORMS:
        if row.execution_op and row.ffi_name is not None:
          jax.ffi.register_ffi_target(
            SANITIZER_EXECUTION_TARGET,
            native().execution_handler(),
            platform=row.ffi_name,
          )
      _execution_registered = True
  return SANITIZER_EXECUTION_TARGET


_iteration_registered = False
_iteration_lock = threading.Lock()


def iteration_target() -> str:
  """The target of the op that marks each test of a loop's condition
  (`sites`: its calls, recorded like any wrapped call, count the loop's
  iterations), registered with XLA on first use for the platforms that
  have the execution op, with the execution op's handler (it writes a
  scalar nobody reads). Registered while the sanitizer wraps, so its calls
  are recorded; its name is `names.SANITIZER_ITERATION_TARGET`."""
  global _iteration_registered
  # Not under `_lock`: the registration passes through `_wrap`, which
  # takes it.
  with _iteration_lock:
    if not _iteration_registered:
      import jax

      for row in platforms.PLATFORMS:
        if row.execution_op and row.ffi_name is not None:
          jax.ffi.register_ffi_target(
            SANITIZER_ITERATION_TARGET,
            native().execution_handler(),
            platform=row.ffi_name,
          )
      _iteration_registered = True
  return SANITIZER_ITERATION_TARGET


def _wrap(name: str, fn: Any, platform: str, api_version: int) -> Any:
  if name in (ENTANGLE_TARGET, SANITIZER_EXECUTION_TARGET):
    # entangle's own no-op touches nothing; the execution op is the
    # sanitizer's own.
    return fn
  if api_version != 1:
    _not_wrapped.append(
      NotWrapped(name, platform, "the untyped custom-call API (api_version 0)")
    )
    return fn
  # The operand whose values name the call's object, as the one access
  # policy picks it (-1: none to record).
  operand = access_policy.footprint(name, sources.current()).operand
  operand = -1 if operand is None else operand
  host = platforms.host_side(platform)
  handlers = fn if isinstance(fn, dict) else {"execute": fn}
  wrapped_handlers: dict[str, Any] = {}
  stages: list[tuple[str, int]] = []
  for stage, handler in handlers.items():
    trampoline, index = native().wrap(handler, operand, host)
    if trampoline is None:
      _not_wrapped.append(
        NotWrapped(name, platform, "every trampoline is in use")
      )
      return fn
    wrapped_handlers[stage] = trampoline
    stages.append((stage, index))
  target = WrappedTarget(name, platform, _family(), tuple(stages))
  with _lock:
    for _, index in stages:
      _by_index[index] = target
    _by_name[(name, platform)] = target
  return (
    wrapped_handlers if isinstance(fn, dict) else wrapped_handlers["execute"]
  )


_REGISTRATION_CODE = ("entangle_jax._src", "entangle_jax.testing._sanitize")


def _family() -> str:
  """The top-level package of the code that registered the target: the
  first caller outside JAX, jaxlib and entangle_jax's registration code."""
  frame = sys._getframe(1)
  while frame is not None:
    module = frame.f_globals.get("__name__", "") or ""
    top = module.split(".")[0]
    if top not in ("jax", "jaxlib") and not module.startswith(
      _REGISTRATION_CODE
    ):
      return top or "?"
    frame = frame.f_back
  return "?"
