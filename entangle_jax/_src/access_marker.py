"""How a `Resource` call records its resource and mode in the compiled module.

``Resource.read`` and ``Resource.write`` call the user's function inside a
``jax.named_scope`` whose name is `scope_component`: ``entangle_jax:read``
or ``entangle_jax:write``, then ``:<name>`` for a named ``Resource``. JAX
writes named scopes into every op's ``op_name`` metadata, which XLA keeps
through optimization, so the record survives ``jit``, ``scan``,
``while_loop``, ``vmap``, ``grad``, ``shard_map`` and ``jax.export`` with
no private or experimental JAX. Every stage reads it back here, once:
`parse_component` (one component) and `marks` (an op's whole ``op_name``,
or a name stack: which records are the op's own, and which JAX copied
onto a backward-pass op).

In a name, ``%``, ``/``, ``(``, ``)``, ``'`` and ``"`` are written
``%25``, ``%2F``, ``%28``, ``%29``, ``%27`` and ``%22``: ``/`` separates
scope components, JAX's transformations wrap a component in parentheses
(``vmap(...)``), and XLA's text escapes quotes with a backslash.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from entangle_jax._src.conflict_rule import Mode

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


_WRAPPER = re.compile(r"(vmap|jvp|transpose)\(")
# The scope JAX opens around a forward computation that jax.checkpoint
# recomputes in the backward pass.
_REMATTED = "rematted_computation"


@dataclasses.dataclass(frozen=True)
class Record:
  """One ``Resource`` record: the access's mode and the ``Resource``'s name
  (None: an unnamed one)."""

  resource: str | None
  mode: Mode


def unwrap(component: str) -> str:
  """A scope component without JAX's transformation wrappers.

  JAX writes ``vmap``, ``jvp`` and ``transpose`` around the first component
  opened inside them (``vmap(read)``, ``transpose(jvp(read))``), or as
  ``vmap()`` when there is none.
  """
  return _wrappers(component)[0]


@functools.lru_cache(maxsize=4096)
def _wrappers(component: str) -> tuple[str, tuple[str, ...]]:
  """`component` without its wrappers, and the wrappers, outermost first."""
  found = []
  while component.endswith(")") and (match := _WRAPPER.match(component)):
    found.append(match.group(1))
    component = component[match.end() : -1]
  return component, tuple(found)


@dataclasses.dataclass(frozen=True)
class Marks:
  """The ``Resource`` records in one ``op_name``.

  Attributes:
    accesses: the records that are the op's own, outermost first.
    inherited: records JAX copied from the forward pass onto a backward
      op: every record at or inside the first component wrapped in
      ``transpose(...)``. JAX wraps only the first component of the
      forward call's scopes, so a record the backward rule opened itself
      cannot be told apart from a copied one there; neither counts.
  """

  accesses: tuple[Record, ...] = ()
  inherited: tuple[Record, ...] = ()

  @property
  def backward(self) -> bool:
    """Whether the op is a backward-pass op under a ``Resource`` record."""
    return bool(self.inherited)


_NO_MARKS = Marks()


@functools.lru_cache(maxsize=4096)
def marks(op_name: str) -> Marks:
  """The ``Resource`` records of `op_name` (`Marks`).

  A forward call that ``jax.checkpoint`` recomputes in the backward pass
  is the forward call again: JAX writes ``rematted_computation`` after the
  transposed component (``transpose(jvp(entangle_jax:read:ps))/
  jvp(entangle_jax:read:ps)/checkpoint/rematted_computation/ffi_call``;
  jax 0.6.2 without the second copy of the forward scopes), and the
  records of the forward scopes are its own.
  """
  if PREFIX not in op_name:
    return _NO_MARKS
  components = [_wrappers(c) for c in op_name.split("/")]
  first = next(
    (k for k, (_, w) in enumerate(components) if "transpose" in w), None
  )
  rematted = first is not None and any(
    inner == _REMATTED for inner, _ in components[first + 1 :]
  )
  own: list[Record] = []
  inherited: list[Record] = []
  recomputed: list[tuple[int, Record]] = []
  for k, (inner, _) in enumerate(components):
    parsed = parse_component(inner)
    if parsed is None:
      continue
    mode, name = parsed
    if first is None or k < first:
      own.append(Record(name, mode))
    elif rematted:
      recomputed.append((k, Record(name, mode)))
    else:
      inherited.append(Record(name, mode))
  if recomputed:
    # jax 0.10 and 0.12 write the forward scopes again after the
    # transposed component; jax 0.6.2 only inside it.
    assert first is not None  # Set whenever something is recomputed.
    later = [a for k, a in recomputed if k > first]
    own += later or [a for _, a in recomputed]
  if not own and not inherited:
    return _NO_MARKS
  return Marks(tuple(own), tuple(inherited))


def has_marks(op_name: str) -> bool:
  """Whether `op_name` holds any ``Resource`` record, own or copied."""
  return marks(op_name) is not _NO_MARKS


@functools.lru_cache(maxsize=4096)
def without_markers(op_name: str) -> str:
  """`op_name` without the components that record ``Resource`` accesses;
  a wrapped record keeps its wrappers (``transpose(jvp())``), so a
  backward-pass op still says so."""
  if PREFIX not in op_name:
    return op_name
  kept = []
  for component in op_name.split("/"):
    inner, wrappers = _wrappers(component)
    if parse_component(inner) is None:
      kept.append(component)
    elif wrappers:
      kept.append("".join(f"{w}(" for w in wrappers) + ")" * len(wrappers))
  return "/".join(kept)
