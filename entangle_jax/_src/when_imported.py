"""Running a function once a module is imported: at once when it already
is, else right after its import finishes.

``import entangle_jax`` registers entangle's handler, lowering and
partitioner with JAX, and that needs JAX. A process that never loads JAX
(``python -m entangle_jax.testing DUMP``, which reads HLO text) should not
pay the seconds ``import jax`` takes, and one that does load JAX needs the
registrations before its first compile. Registering as ``import jax``
finishes gives both: nothing can compile or deserialize a module before
that, and JAX's own registrations are complete by then.

`call_when_imported` puts a finder at the front of ``sys.meta_path`` that
answers for that one module name only: it asks the other finders for the
module's spec and wraps its loader, so that once the module's code has
run, the real loader is put back (``module.__loader__`` and
``__spec__.loader``, as if nothing had wrapped it), the finder leaves
``sys.meta_path`` and the function runs. If the module's code raises,
the finder stays for the next attempt. If the function raises, so does
the import, as an ``ImportError`` naming the function.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Sequence


def call_when_imported(name: str, function: Callable[[], None]) -> None:
  """Calls `function` now if module `name` is in ``sys.modules``, else
  once ``import name`` has run the module's code (see the module
  docstring). `name` is a top-level module."""
  if name in sys.modules:
    function()
  else:
    sys.meta_path.insert(0, _Finder(name, function))


class _Finder(importlib.abc.MetaPathFinder):
  """Answers for module `name` with the spec the other finders give,
  its loader wrapped to call `function` after the module's code ran."""

  def __init__(self, name: str, function: Callable[[], None]):
    self.name = name
    self.function = function
    self._asking = threading.local()

  def find_spec(
    self,
    fullname: str,
    path: Sequence[str] | None,
    target: types.ModuleType | None = None,
  ) -> importlib.machinery.ModuleSpec | None:
    if fullname != self.name or getattr(self._asking, "now", False):
      return None
    self._asking.now = True  # find_spec below asks every finder, this one too
    try:
      spec = importlib.util.find_spec(fullname)
    finally:
      self._asking.now = False
    if spec is None or spec.loader is None:
      return spec
    spec.loader = _ThenCall(spec.loader, self)
    return spec

  def done(self) -> None:
    """Leaves ``sys.meta_path``, then calls the function."""
    if self in sys.meta_path:
      sys.meta_path.remove(self)
    try:
      self.function()
    except Exception as error:
      raise ImportError(
        f"{self.function!r}, run when {self.name} was imported, failed: {error}"
      ) from error


class _ThenCall(importlib.abc.Loader):
  """`loader`, then `finder.done()` once the module's code has run."""

  def __init__(self, loader: importlib.abc.Loader, finder: _Finder):
    self.loader = loader
    self.finder = finder

  def create_module(
    self, spec: importlib.machinery.ModuleSpec
  ) -> types.ModuleType | None:
    return self.loader.create_module(spec)

  def exec_module(self, module: types.ModuleType) -> None:
    # The module sees its own loader while its code runs, and keeps it.
    module.__loader__ = self.loader
    if module.__spec__ is not None:
      module.__spec__.loader = self.loader
    self.loader.exec_module(module)
    self.finder.done()
