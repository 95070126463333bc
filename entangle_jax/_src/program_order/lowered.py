"""What a first-order equation lowers to: its custom calls, read from the
StableHLO of the equation lowered alone.

A binding that binds a primitive of its own (klujax, jax-finufft,
mpi4jax) shows that primitive in the jaxpr, not a custom call: the call
appears only when the primitive is lowered; so does one of JAX's own
first-order primitives that makes native calls (``call_exported``: the
exported module's). So a first-order equation is lowered in isolation, as
``jax.jit(bind, keep_unused=True).lower(*avals)`` (public API), and its
module's ``stablehlo.custom_call`` ops are read, with, for each call:

* which of the equation's inputs each operand is (through ops that only
  move elements: reshape, transpose, broadcast, slice), or None where the
  operand is computed;
* which inputs it depends on, and which outputs depend on it;
* which outputs each of its results is (through the same ops).

One lowering per primitive, params, input types and backend (cached).
Calls inside ``func.call``ed functions are followed into them; calls inside
regions (a ``while``'s body) depend on everything the region op takes.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax
from jax.extend import core as jex_core

from entangle_jax._src import jax_compat


@dataclasses.dataclass(frozen=True)
class CustomCall:
  """One ``stablehlo.custom_call`` in an equation's lowering."""

  target: str
  side_effect: bool
  operands: tuple[int | None, ...]
  """Per operand of the call, the equation's input it is (its elements
  moved at most), or None for a value computed in the lowering."""
  inputs: frozenset[int]
  """The equation's inputs the call depends on."""
  results: tuple[tuple[int, ...], ...]
  """Per result of the call, the equation's outputs that are it."""
  outputs: frozenset[int]
  """The equation's outputs that depend on the call."""


@dataclasses.dataclass(frozen=True)
class Lowered:
  """The custom calls of an equation's lowering, or why it has none known:
  `error` says why the equation could not be lowered alone."""

  calls: tuple[CustomCall, ...] = ()
  error: str | None = None


@dataclasses.dataclass(frozen=True)
class _Info:
  inputs: frozenset[int] = frozenset()
  calls: frozenset[int] = frozenset()
  direct: int | None = None  # The input it is, elements moved at most.
  origin: tuple[int, int] | None = None  # (call, result) it is, likewise.


_MOVES = (
  "stablehlo.reshape",
  "stablehlo.transpose",
  "stablehlo.broadcast_in_dim",
  "stablehlo.slice",
)
"""Ops whose one result holds only elements of their first operand: the
object an operand names is the input's (or a subset of it)."""

_CALLS = {"func.call": "callee", "stablehlo.composite": "decomposition"}
"""Ops that call a function of the module, and the attribute naming it:
``lax.composite`` lowers to a ``stablehlo.composite`` whose decomposition
function holds its calls (which XLA inlines)."""

_PASS_ALL = ("stablehlo.optimization_barrier",)
"""Ops whose result k is their operand k."""


def _union(infos) -> _Info:
  inputs, calls = frozenset(), frozenset()
  for info in infos:
    inputs |= info.inputs
    calls |= info.calls
  return _Info(inputs, calls)


class _Reader:
  """A module's custom calls, by a forward walk over its functions."""

  def __init__(self, module):
    self.funcs = {}
    for op in module.body.operations:
      if op.operation.name == "func.func":
        self.funcs[_symbol(op.attributes["sym_name"])] = op
    self.calls: list[dict[str, Any]] = []
    self.depth = 0

  def run_func(self, func, args: list[_Info]) -> list[_Info]:
    block = func.regions[0].blocks[0]
    env: dict[Any, _Info] = {}
    for value, info in zip(block.arguments, args, strict=False):
      env[value] = info
    return self.run_block(block, env)

  def run_block(self, block, env) -> list[_Info]:
    returned: list[_Info] = []
    for op in block.operations:
      name = op.operation.name
      ins = [env.get(v, _Info()) for v in op.operands]
      if name in ("func.return", "stablehlo.return"):
        returned = ins
        continue
      if name == "stablehlo.custom_call":
        outs = self.custom_call(op, ins)
      elif name in _CALLS and self.depth < 32:
        callee = self.funcs.get(_symbol(op.attributes[_CALLS[name]]))
        if callee is None:
          outs = [_union(ins)] * len(op.results)
        else:
          self.depth += 1
          outs = self.run_func(callee, ins)
          self.depth -= 1
      elif name in _MOVES and ins:
        outs = [ins[0]]
      elif name in _PASS_ALL:
        outs = list(ins)
      else:
        outs = [self.region_op(op, ins)] * len(op.results)
      for value, info in zip(op.results, outs, strict=False):
        env[value] = info
    return returned

  def region_op(self, op, ins: list[_Info]) -> _Info:
    """An op's results: depending on all its operands, and on every call
    inside its regions (which see all its operands)."""
    joined = _union(ins)
    before = len(self.calls)
    for region in op.regions:
      for block in region.blocks:
        env: dict[Any, _Info] = {v: joined for v in block.arguments}
        self.run_block(block, _Chained(env, joined))
    inner = frozenset(range(before, len(self.calls)))
    return _Info(joined.inputs, joined.calls | inner)

  def custom_call(self, op, ins: list[_Info]) -> list[_Info]:
    index = len(self.calls)
    attributes = op.attributes
    side_effect = "has_side_effect" in attributes and str(
      attributes["has_side_effect"]
    ).strip().lower() in ("true", "1")
    joined = _union(ins)
    self.calls.append(
      {
        "target": _symbol(attributes["call_target_name"]),
        "side_effect": side_effect,
        "operands": tuple(i.direct for i in ins),
        "inputs": joined.inputs,
        "n_results": len(op.results),
      }
    )
    return [
      _Info(joined.inputs, joined.calls | {index}, None, (index, r))
      for r in range(len(op.results))
    ]


class _Chained(dict):
  """A region's values: its own, else the value's from outside (a value
  captured from the enclosing block), seen as all the region op takes."""

  def __init__(self, own: dict, outside: _Info):
    super().__init__(own)
    self.outside = outside

  def get(self, key, default=None):
    if key in self:
      return self[key]
    return self.outside


def _symbol(attribute) -> str:
  """A symbol or string attribute's text, without ``@`` and quotes."""
  text = str(attribute)
  if text.startswith("@"):
    text = text[1:]
  if len(text) >= 2 and text[0] == text[-1] == '"':
    text = text[1:-1]
  return text


def _is_token(value) -> bool:
  return "token" in str(value.type)


def read_module(module, n_in: int, n_out: int) -> tuple[CustomCall, ...]:
  """The custom calls of `module` (a ``jax.jit`` lowering's StableHLO of
  a function of `n_in` inputs and `n_out` outputs)."""
  reader = _Reader(module)
  main = reader.funcs.get("main")
  if main is None:
    return ()
  args = list(main.regions[0].blocks[0].arguments)
  tokens = [_is_token(a) for a in args]
  mapped = tokens.count(False) == n_in
  infos = []
  k = 0  # The position of the next array argument among the arrays.
  for token in tokens:
    if token:
      infos.append(_Info())
    elif not mapped:
      infos.append(_Info(frozenset(range(n_in))))
    else:
      infos.append(_Info(frozenset({k}), frozenset(), k))
      k += 1
  returned = reader.run_func(main, infos)
  result_types = list(main.type.results)
  outs = [
    info
    for info, kind in zip(returned, result_types, strict=False)
    if "token" not in str(kind)
  ]
  if len(outs) != n_out:  # Cannot tell which output is which.
    outs = [_union(returned)] * n_out
    for i in range(n_out):
      outs[i] = dataclasses.replace(outs[i], origin=None)
  found = []
  for index, call in enumerate(reader.calls):
    results = tuple(
      tuple(o for o, info in enumerate(outs) if info.origin == (index, r))
      for r in range(call["n_results"])
    )
    outputs = frozenset(o for o, info in enumerate(outs) if index in info.calls)
    found.append(
      CustomCall(
        call["target"],
        call["side_effect"],
        call["operands"] if mapped else (None,) * len(call["operands"]),
        call["inputs"],
        results,
        outputs,
      )
    )
  return tuple(found)


def lower(eqn) -> Lowered:
  """The custom calls `eqn` lowers to on the default backend, once per
  primitive, params, input types and backend."""
  key = _key(eqn)
  if key is not None:
    found = _CACHE.get(key)
    if found is None:
      found = _CACHE[key] = _lower(eqn)
    return found
  found = _BY_EQN.get(id(eqn))
  if found is not None and found[0] is eqn:
    return found[1]
  if len(_BY_EQN) > 1024:
    _BY_EQN.clear()
  result = _lower(eqn)
  _BY_EQN[id(eqn)] = (eqn, result)
  return result


_CACHE: dict[Any, Lowered] = {}
_BY_EQN: dict[int, tuple[Any, Lowered]] = {}


def key_of(eqn):
  """What `lower` caches `eqn`'s lowering under (primitive, params, input
  types, backend), or None where its params cannot be hashed."""
  return _key(eqn)


def _key(eqn):
  try:
    params = tuple(sorted(eqn.params.items()))
    key = (
      eqn.primitive,
      params,
      tuple(_aval_key(v.aval) for v in eqn.invars),
      jax.default_backend(),
      bool(jax.config.jax_enable_x64),  # ty: ignore[missing-attribute]
    )
    hash(key)
  except Exception:  # Unhashable params: once per equation instead.
    return None
  return key


def _aval_key(aval):
  return (
    tuple(getattr(aval, "shape", ())),
    getattr(aval, "dtype", None),  # Hashable, and cheaper than its text.
    bool(getattr(aval, "weak_type", False)),
  )


def _lower(eqn) -> Lowered:
  # A token input (a binding's call that takes one) is lowered from a
  # token: it has no shape or dtype to describe it by.
  avals = [
    jax.lax.create_token()
    if jax_compat.is_token_aval(v.aval)
    else jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
    for v in eqn.invars
  ]

  def one(*args):
    return jax_compat.bind_equation(eqn, args)

  try:
    lowered = jax.jit(one, keep_unused=True).lower(*avals)
    module = lowered.compiler_ir("stablehlo")
  except Exception as error:  # Anything: it is named, never passed by.
    return Lowered(error=f"{type(error).__name__}: {error}".split("\n")[0])
  try:
    calls = read_module(module, len(eqn.invars), len(eqn.outvars))
  except Exception as error:  # A module this reader does not follow.
    return Lowered(error=f"{type(error).__name__}: {error}".split("\n")[0])
  return Lowered(calls)


# JAX's own primitives ------------------------------------------------------

_JAX_OWN: set[Any] = set()
_SCANNED: set[str] = set()
_NOT_OWN: dict[Any, int] = {}  # Primitive: len(sys.modules) when looked.


def is_jax_primitive(primitive) -> bool:
  """Whether `primitive` is one of JAX's own (a global of a loaded ``jax``
  or ``jaxlib`` module, ``jax.extend.core.primitives`` among them). Their
  sub-programs are their rules' (`rules`), and one that cannot be lowered
  alone (a collective, outside its named axis) is read as making no
  native call; the others are lowered to look as a binding's are, since
  no list of those that make none can be trusted to stay complete
  (``debug_print``, ``call_exported``)."""
  if primitive in _JAX_OWN:
    return True
  if _NOT_OWN.get(primitive) == len(sys.modules):
    return False
  _scan_jax_modules()
  if primitive in _JAX_OWN:
    return True
  _NOT_OWN[primitive] = len(sys.modules)
  return False


def _scan_jax_modules() -> None:
  """Adds the primitives of the JAX modules loaded since the last scan."""
  new = [
    name
    for name in list(sys.modules)
    if name not in _SCANNED
    and (name in ("jax", "jaxlib") or name.startswith(("jax.", "jaxlib.")))
  ]
  for name in new:
    _SCANNED.add(name)
    module = sys.modules.get(name)
    try:
      values = list(vars(module).values())
    except TypeError:
      continue
    for value in values:
      if isinstance(value, jex_core.Primitive):
        _JAX_OWN.add(value)
