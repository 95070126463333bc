"""Every private JAX name the sanitizer uses, in one place, each guarded by
tests/sanitize/jax_hooks_test.py.

Three functions are replaced, and put back after:
``jaxlib.xla_client.register_custom_call_target``, which
``jax.ffi.register_ffi_target`` (and the older direct route) calls with
each handler, from the sanitizer's start; and, inside a ``sanitize()``
block only, ``jax._src.compiler.compile_or_get_cached``, which every
``jit`` compile passes through with its StableHLO module and its host
callbacks' Python callables (``host_callbacks``); and, for TPU, where
those are host send/recv callback objects instead,
``jax._src.callback._emit_tpu_python_callback``, which receives the
Python callable as it lowers the callback (`TPU_CALLBACK`). One private
function is recognised, not replaced: ``jax.debug.print``'s printer
(`DEBUG_PRINT_CALLBACK`), whose format string names its callback.

For the cross-rank check's execution record
(`entangle_jax.testing._ways_in.executions`), `on_execute` wraps
``jax._src.interpreters.pxla.ExecuteReplicated.__call__``, through which
a jitted module runs from Python, and turns off JAX's two C++ fast paths
(``jax._src.pjit._get_fastpath_data``,
``pxla.MeshExecutable.create_cpp_call``, and the one a
``jax._src.stages.Compiled`` keeps in ``_call``), through which Python
sees nothing of a call (guarded by tests/ways_in/rank_sequences_test.py).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Generator
from typing import Any

REGISTER = "register_custom_call_target"
COMPILE = "compile_or_get_cached"
COMPILE_HOST_CALLBACKS = ("host_callbacks", 2)
"""`COMPILE`'s argument with the Python callables of the module's host
callbacks (each callback's custom call names one by its ``index``
attribute), and its position after the backend and the module."""


TPU_CALLBACK = "_emit_tpu_python_callback"
"""The function that lowers a host callback on TPU to host transfers
(``_emit_tpu_python_callback(backend, ctx, callback, ...)``): it hands
`callback`, the Python callable, to the backend inside a host send/recv
callback object, which the compile hook cannot wrap; so the callable is
wrapped here, as it is lowered."""


DEBUG_PRINT_MODULE = "jax._src.debugging"
DEBUG_PRINT_CALLBACK = "_format_print_callback"
"""The function that prints a ``jax.debug.print``'s text: JAX hands the
host callback ``functools.partial(_format_print_callback, fmt, ...)``
(inside its wrappers), the format string first, which names the
callback in the sanitizer's report (`callbacks.function_name`)."""


def callback_module() -> types.ModuleType:
  """The module whose `TPU_CALLBACK` JAX's host callbacks call on TPU."""
  from jax._src import callback

  return callback


def registration_module() -> types.ModuleType:
  """The module whose `REGISTER` every FFI registration calls."""
  from jax._src.lib import xla_client

  return xla_client


def compiler_module() -> types.ModuleType:
  """The module whose `COMPILE` every compile of a jitted module calls
  (``compile_or_get_cached(backend, module, ...)``)."""
  from jax._src import compiler

  return compiler


def mlir_ir() -> types.ModuleType:
  """JAX's MLIR Python bindings (``ir``), to edit a module before it is
  compiled."""
  from jax._src.lib.mlir import ir

  return ir


def hlo_text(module: bytes) -> str:
  """The HLO text of an MLIR module's bytecode, before optimization, with
  each op's scope and Python stack (as ``Lowered.as_text(dialect="hlo",
  debug_info=True)`` prints it), through ``jax._src.stages``'s converter
  and printer options.

  Raises:
    Exception: where this JAX cannot convert or print it (jax 0.6.2).
  """
  from jax._src import stages

  computation = stages._jax.mlir.mlir_module_to_xla_computation(
    module, use_tuple_args=False
  )
  options = stages.hlo.HloPrintOptions.short_parsable()
  options.print_metadata = True
  return computation.as_hlo_module().to_string(options)


def replace(
  module: types.ModuleType | type, name: str, make: Callable[[Any], Any]
) -> Callable[[], None]:
  """Sets ``module.name`` to ``make(original)`` (a module's or a class's
  attribute); returns the undo."""
  original = getattr(module, name)
  setattr(module, name, make(original))

  def undo() -> None:
    setattr(module, name, original)

  return undo


def _no_fastpath(*args, **kwargs) -> None:
  """`on_execute`'s stand-in for ``pjit._get_fastpath_data``: none."""
  return None


@contextlib.contextmanager
def on_execute(
  callback: Callable[[Any], Callable[[bool], None]],
) -> Generator[None]:
  """Calls ``callback(executable)`` as each jitted module of this process
  begins to run, while the block runs: `executable` is the loaded XLA
  executable (``hlo_modules()`` gives its module). What it returns is
  called once the execution is handed to the runtime: with True, or with
  False where it raised first (a deleted input: it never ran).

  A jitted call runs its module from C++ once it has run once (pjit's
  fast path, and a ``Compiled``'s own), where Python sees nothing. Inside
  the block neither fast path is made (``_get_fastpath_data`` gives None,
  ``MeshExecutable.create_cpp_call`` none), so every call goes through
  ``ExecuteReplicated.__call__``, which is wrapped. Fast paths made before
  the block are dropped as it begins (``jax.clear_caches``: what was
  compiled before is compiled again), and a ``Compiled``'s own at each
  of its calls (``Compiled._call``; it keeps the slow one after). Calls
  run slower inside.
  """
  import jax
  from jax._src import pjit, stages
  from jax._src.interpreters import pxla

  def called(execute):
    def wrapped(self, *args):
      done = callback(self.xla_executable)
      try:
        out = execute(self, *args)
      except BaseException:
        done(False)
        raise
      done(True)
      return out

    return wrapped

  def uncached(call):
    # A `Compiled` keeps the fast path it made at its first call, which
    # clearing JAX's caches leaves: dropped at each call inside.
    def wrapped(self, *args, **kwargs):
      self._call = None
      return call(self, *args, **kwargs)

    return wrapped

  jax.clear_caches()
  undo = [
    replace(pxla.ExecuteReplicated, "__call__", called),
    replace(stages.Compiled, "__call__", uncached),
    replace(pjit, "_get_fastpath_data", lambda _: _no_fastpath),
    replace(pxla.MeshExecutable, "create_cpp_call", lambda _: _no_fastpath),
  ]
  try:
    yield
  finally:
    for step in reversed(undo):
      step()
    jax.clear_caches()
