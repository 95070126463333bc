"""entangle-jax: order native side effects inside compiled JAX programs.

``entangle(payload, *witnesses)`` returns ``payload`` unchanged, but under
``jit`` it is ordered after every witness's producer. See ``entangle``'s
docstring, the documentation (docs/), and ``entangle_jax.testing`` for
proving the order on the compiled module. ``Resource`` adds those calls for
you, keeping the program order of every read and write of one native
resource.
"""

from entangle_jax import _native_loader

_native_loader.register_targets(_native_loader.load_native())

from entangle_jax._entangle import entangle  # noqa: E402
from entangle_jax._export import export_safety_checks  # noqa: E402
from entangle_jax._resource import Resource  # noqa: E402
from entangle_jax._version import __version__  # noqa: E402

__all__ = ["Resource", "__version__", "entangle", "export_safety_checks"]
