"""The modules compiled inside a ``sanitize()`` block as the user's
program made them: where the report's word on the static check comes
from (`session._Static`), never the sanitizer's edited copy."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from entangle_jax.testing._sanitize import jax_hooks

_lock = threading.Lock()


@dataclasses.dataclass(eq=False)
class UserModule:
  """The module a compile under the hook was handed, as the user's
  program made it (not the sanitizer's edited copy), and how to compile it
  as JAX would have outside the block: what the static check's word in the
  report is taken from (`session._Static`), so that it is the answer of
  ``races()`` on the user's module, never that of the copy (where
  identical calls are not merged and shared functions are copied).

  Attributes:
    compile: compiles the module with the compile's own backend and
      arguments (the user's host callbacks, not the recorders), past the
      hook; returns the executable.
    computation: the MLIR module (JAX's own, unedited).
    bytecode: writes an MLIR module as bytecode.
  """

  compile: Any
  computation: Any
  bytecode: Any

  def texts(self) -> tuple[str, str | None]:
    """The optimized HLO text of the user's module, and its text before
    optimization (None where this JAX cannot print it): what ``races()``
    of its ``Lowered`` reads.

    Raises:
      Exception: whatever the compile raises.
    """
    executable = self.compile()
    text = executable.hlo_modules()[0].to_string()
    try:
      before = jax_hooks.hlo_text(self.bytecode(self.computation))
    except Exception:
      before = None
    return text, before


_user_modules: dict[int, UserModule] = {}


def take_user_modules(first: int) -> dict[int, UserModule]:
  """The user's modules of the compiles from serial `first` on, by serial,
  handed over (no longer held here: the caller's record of the run keeps
  them as long as it needs them)."""
  with _lock:
    taken = {k: v for k, v in _user_modules.items() if k >= first}
    for k in taken:
      del _user_modules[k]
  return taken


def keep(serial: int, compile: Any, computation: Any, bytecode: Any) -> None:
  """Keeps compile `serial`'s user module (`UserModule`'s fields) until
  `take_user_modules` hands it over."""
  with _lock:
    _user_modules[serial] = UserModule(compile, computation, bytecode)
