"""entangle-jax: order native side effects inside compiled JAX programs.

``entangle(payload, *witnesses)`` returns ``payload`` unchanged, but under
``jit`` it is ordered after every witness's producer. See ``entangle``'s
docstring, the documentation (docs/), and ``entangle_jax.testing`` for
proving the order on the compiled module. ``Resource`` adds those calls for
you, keeping the program order of every read and write of one native
resource. ``declare_target`` and ``declare_target_mode`` say what calls to
a native target touch (what the race check in ``entangle_jax.testing``
reads); ``import entangle_jax`` loads nothing of that analysis.

Importing the package loads entangle's extension and registers its one FFI
handler with XLA, and the primitive's lowering and partitioner with JAX:
at once when JAX is already imported, else as soon as ``import jax``
finishes (`entangle_jax._src.when_imported`), before anything can compile
or deserialize a module. So a process that never imports JAX, such as
``python -m entangle_jax.testing DUMP`` reading HLO text, does not load
it; the first use of a name that needs JAX (``entangle``, ``Resource``,
``in_program_order``, ``export_safety_checks``) imports it. Nothing else:
the example resource's handlers are registered by using
``entangle_jax.testing``'s example store.
"""

from __future__ import annotations

import importlib
import pathlib as _pathlib
from typing import TYPE_CHECKING, Any

try:
  from entangle_jax._version import __version__
except ModuleNotFoundError as missing:
  # The build writes _version.py (and the extensions) into what it
  # installs, never into the checkout: a checkout's own folder imported
  # instead of the installed package (Python puts the current folder first
  # on sys.path for `python -m` and `python -c`) has neither.
  _here = _pathlib.Path(__file__).parent
  if (
    missing.name != "entangle_jax._version"
    or not (_here / "_version.py.in").exists()
  ):
    raise
  from entangle_jax._src.native import checkout_import_advice

  raise ImportError(checkout_import_advice(_here)) from None

from entangle_jax._src import native as _native
from entangle_jax._src import when_imported as _when_imported
from entangle_jax._src.targets.in_code import (
  declare_target,
  declare_target_mode,
)

if TYPE_CHECKING:  # Imported on first use (`__getattr__`): they need JAX.
  from entangle_jax._src.entangle import entangle
  from entangle_jax._src.export import export_safety_checks
  from entangle_jax._src.program_order import in_program_order
  from entangle_jax._src.resource import Resource

# Each name that needs JAX, and the module that defines it.
_NEED_JAX = {
  "Resource": "entangle_jax._src.resource",
  "entangle": "entangle_jax._src.entangle",
  "export_safety_checks": "entangle_jax._src.export",
  "in_program_order": "entangle_jax._src.program_order",
}

# Loaded now, so that an extension that cannot load fails this import.
_extension = _native.load()


_registered = False


def _register() -> None:
  global _registered
  if _registered:
    return
  from entangle_jax._src import lowering  # noqa: F401  (registers)

  _native.register(_extension)
  _registered = True


_when_imported.call_when_imported("jax", _register)

__all__ = [
  "Resource",
  "__version__",
  "declare_target",
  "declare_target_mode",
  "entangle",
  "export_safety_checks",
  "in_program_order",
]


def __getattr__(name: str) -> Any:
  # PEP 562: the names that need JAX import it when first used.
  if name in _NEED_JAX:
    value = getattr(importlib.import_module(_NEED_JAX[name]), name)
    # Registered already, unless another finder ahead of ours loaded JAX.
    _register()
    globals()[name] = value
    return value
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted({*globals(), *_NEED_JAX})
