"""What the analysis takes: a compiled module, and how it gets its text.

Text needs no JAX: this module imports it only when handed something
other than text (which, if JAX is not loaded yet, cannot be a JAX
object), so reading HLO text, as ``python -m entangle_jax.testing DUMP``
does, never loads it.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
  import jax

# Each Compiled's text, printed once: as_text() prints the module anew on
# every call (tens of milliseconds for thousands of instructions), and
# ``races(c)`` then ``order_graph(c)`` ask for it twice. A Compiled never
# changes; the entry goes with it.
_TEXTS: weakref.WeakKeyDictionary[jax.stages.Compiled, str | None] = (
  weakref.WeakKeyDictionary()
)

# Each Lowered's module before optimization, printed once (the race check
# and the TPU host-callback order both read it).
_BEFORE: weakref.WeakKeyDictionary[jax.stages.Lowered, str | None] = (
  weakref.WeakKeyDictionary()
)

CompiledModule: TypeAlias = "jax.stages.Compiled | jax.stages.Lowered | str"
"""A ``jax.stages.Compiled`` (``jax.jit(f).lower(*args).compile()``), a
``jax.stages.Lowered`` (compiled when analysed) or the optimized HLO text."""

_NOT_A_MODULE = (
  "{}: compiled must be a jax.stages.Compiled "
  "(jax.jit(f).lower(*args).compile()), a jax.stages.Lowered or HLO text, "
  "not {}{}"
)


def module_text(compiled: CompiledModule, *, who: str = "module_text") -> str:
  """The optimized HLO text of `compiled` (or `compiled` itself, if text).

  A ``jax.stages.Lowered`` is compiled first. `who` is the public function
  the user called, which the error names.

  Raises:
    TypeError: `compiled` is none of those (for example a jitted function,
      or a ``jax.export.Exported``: analyse
      ``jax.jit(exported.call).lower(*args).compile()``).
    ValueError: the ``Compiled`` has no HLO text.
  """
  if isinstance(compiled, str):
    return compiled
  if "jax" not in sys.modules:  # Then no object can be a JAX one.
    raise TypeError(_NOT_A_MODULE.format(who, type(compiled).__name__, ""))
  import jax
  from jax import export

  if isinstance(compiled, jax.stages.Lowered):
    compiled = compiled.compile()
  if not isinstance(compiled, jax.stages.Compiled):
    hint = (
      " (compile the exported module where it runs: "
      "jax.jit(exported.call).lower(*args).compile())"
      if isinstance(compiled, export.Exported)
      else ""
    )
    raise TypeError(_NOT_A_MODULE.format(who, type(compiled).__name__, hint))
  if compiled not in _TEXTS:
    _TEXTS[compiled] = compiled.as_text()
  text = _TEXTS[compiled]
  if text is None:
    raise ValueError(f"{compiled!r} has no HLO text to analyse")
  return text


def lowered_hlo_text(compiled: CompiledModule) -> str | None:
  """The HLO module before optimization of a ``jax.stages.Lowered``
  (``as_text(dialect="hlo", debug_info=True)``: with each op's scope and
  Python stack, which the race check compares with the optimized
  module's); None for anything else (a ``Compiled`` keeps no such module)
  or when it cannot be printed."""
  if isinstance(compiled, str) or "jax" not in sys.modules:
    return None
  import jax

  if not isinstance(compiled, jax.stages.Lowered):
    return None
  if compiled in _BEFORE:
    return _BEFORE[compiled]
  try:
    text = compiled.as_text(dialect="hlo", debug_info=True)
  except TypeError:  # A JAX whose as_text takes no debug_info.
    try:
      text = compiled.as_text(dialect="hlo")
    except Exception:
      text = None
  except Exception:  # An older or newer JAX that prints no HLO: no order.
    text = None
  _BEFORE[compiled] = text
  return text
