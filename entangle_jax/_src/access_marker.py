"""How a `Resource` call records its resource and mode in the compiled module.

``Resource.read`` and ``Resource.write`` call the user's function inside a
``jax.named_scope`` whose name is `scope_component`: ``entangle_jax:read``
or ``entangle_jax:write``, then ``:<name>`` for a named ``Resource``. JAX
writes named scopes into every op's ``op_name`` metadata, which XLA keeps
through optimization, so the record survives ``jit``, ``scan``,
``while_loop``, ``vmap``, ``grad``, ``shard_map`` and ``jax.export`` with
no private or experimental JAX. `entangle_jax.testing` reads it back with
`parse_component`.

In a name, ``%``, ``/``, ``(``, ``)``, ``'`` and ``"`` are written
``%25``, ``%2F``, ``%28``, ``%29``, ``%27`` and ``%22``: ``/`` separates
scope components, JAX's transformations wrap a component in parentheses
(``vmap(...)``), and XLA's text escapes quotes with a backslash.
"""

from __future__ import annotations

import re
from typing import Literal

Mode = Literal["read", "write"]
MODES: tuple[Mode, ...] = ("read", "write")
PREFIX = "entangle_jax:"
_COMPONENT = re.compile(r"entangle_jax:(read|write)(?::([^/()]*))?")
_ESCAPES = {
  "%": "%25",
  "/": "%2F",
  "(": "%28",
  ")": "%29",
  "'": "%27",
  '"': "%22",
}
_ESCAPED = re.compile(r"%(25|2F|28|29|27|22)")


def scope_component(mode: Mode, name: str | None) -> str:
  """The named-scope name that records an access of `mode` to `name`.

  `name` None stands for an unnamed ``Resource``.
  """
  if name is None:
    return f"{PREFIX}{mode}"
  return f"{PREFIX}{mode}:{''.join(_ESCAPES.get(c, c) for c in name)}"


def parse_component(component: str) -> tuple[Mode, str | None] | None:
  """``(mode, name)`` if `component` is a `scope_component`, else None."""
  match = _COMPONENT.fullmatch(component)
  if match is None:
    return None
  name = match.group(2)
  if name is not None:
    name = _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)
  mode: Mode = "read" if match.group(1) == "read" else "write"
  return mode, name
