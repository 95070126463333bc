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
handler with XLA, and registers the primitive's lowering and partitioner.
Nothing else: the example resource's handlers are registered by importing
``entangle_jax.testing``.
"""

from entangle_jax._src import lowering as _lowering  # noqa: F401  (registers)
from entangle_jax._src import native as _native
from entangle_jax._src.entangle import entangle
from entangle_jax._src.export import export_safety_checks
from entangle_jax._src.program_order import in_program_order
from entangle_jax._src.resource import Resource
from entangle_jax._src.targets.in_code import (
  declare_target,
  declare_target_mode,
)
from entangle_jax._version import __version__

_native.register(_native.load())

__all__ = [
  "Resource",
  "__version__",
  "declare_target",
  "declare_target_mode",
  "entangle",
  "export_safety_checks",
  "in_program_order",
]
