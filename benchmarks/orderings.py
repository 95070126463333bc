"""The ways a binding author can order a read before the next write.

Each `Ordering` writes one hazard of the example store,
``write(slot, 1); x = read(slot); write(slot, 2)``, its own way: the read
must see 1.0, so the second write must wait for it. The hazard is the
demo's (`entangle_jax.demo._hazard`), with the read made slow by the
store's ``delay_us`` instead of arithmetic in front of it, so that a
program can hold many hazards that are all alike. Every hazard names its
calls with ``jax.named_scope`` ("first_write", "read", "second_write"), for
``entangle_jax.testing.happens_before``.

Some ways exist only in some jax versions (`Ordering.missing`): JAX's
experimental ``control_dep`` and ``program_order`` came and went.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks import host_store
from entangle_jax import Resource, in_program_order, testing
from entangle_jax.demo import _hazard

EXPECTED = _hazard.EXPECTED
"""What the read sees when it runs before the second write."""

# Keys of the orderings, for the checks in `benchmarks.alternatives`.
NONE = "none"
BARRIER = "barrier"
CONTROL_DEP = "control_dep"
PROGRAM_ORDER = "program_order"
CALLBACK = "io_callback"
CALLBACK_UNORDERED = "io_callback_unordered"
THREADED = "threaded"
ENTANGLE = "entangle"
RESOURCE = "resource"
IN_PROGRAM_ORDER = "in_program_order"

Hazard = Callable[[Any, int], tuple[jax.Array, jax.Array]]
"""``hazard(slot, delay_us) -> (read result, second write's token)``."""


@dataclasses.dataclass(frozen=True)
class Ordering:
  """One way of ordering the read before the second write."""

  key: str
  label: str
  hazard: Hazard
  missing: Callable[[], str | None] = lambda: None
  """Why this jax cannot run it ("not in jax X"), or None when it can."""
  python_calls: bool = False
  """Its calls are Python host callbacks, not the native store's."""


def native_hazard(
  before_second_write=lambda token, x: (token, x),
  after_second_write=lambda x, token: None,
) -> Hazard:
  """The hazard on the native store, ordered by the two hooks: the first
  may replace the token (and the read's result) the second write takes;
  the second sees the read's result and the second write's token."""

  def hazard(slot, delay_us):
    with jax.named_scope("first_write"):
      token = testing.write_slot(slot, EXPECTED)
    with jax.named_scope("read"):
      x = testing.read_slot(token, delay_us=delay_us)
    token, x = before_second_write(token, x)
    with jax.named_scope("second_write"):
      after = testing.write_slot(token, EXPECTED + 1)
    after_second_write(x, after)
    return x, after

  return hazard


def demo_ordering(ordering: _hazard.Ordering) -> Hazard:
  """The hazard ordered as the demo orders it (none, barrier, entangle)."""

  def order(token, x):
    token, _, x = _hazard.order_after_read(ordering, token, x)
    return token, x

  return native_hazard(order)


CONTROL_DEP_NAME = ("jax.experimental.control_deps", "control_dep")
PROGRAM_ORDER_NAME = ("jax.experimental.overlap", "program_order")


def jax_name(module: str, name: str) -> Any:
  """``module.name`` of the installed jax, or None where it has none.

  Imported by name, as the experimental names exist only in some jax
  versions (the type checker sees one).
  """
  try:
    return getattr(importlib.import_module(module), name)
  except (ImportError, AttributeError):
    return None


def missing_from_jax(module: str, name: str) -> Callable[[], str | None]:
  """`Ordering.missing` for the JAX name ``module.name``."""

  def missing() -> str | None:
    if jax_name(module, name) is None:
      return f"not in jax {jax.__version__}"
    return None

  return missing


def control_dep_hazard(slot, delay_us):
  """``control_dep(read result, second write's token)``: JAX adds the read
  to the write's control predecessors."""
  control_dep = jax_name(*CONTROL_DEP_NAME)
  return native_hazard(after_second_write=control_dep)(slot, delay_us)


def program_order_hazard(slot, delay_us):
  """The whole hazard under ``program_order(..., enforce=True)``: JAX
  chains each call's operands to the previous call's results through
  ``optimization_barrier``."""
  unordered = native_hazard()

  def hazard(slot):
    return unordered(slot, delay_us)

  return jax_name(*PROGRAM_ORDER_NAME)(hazard, enforce=True)(slot)


def threaded_token(token, x):
  """The token the read hands back: the token with the read's result
  folded in, which the second write takes as its slot operand.

  The example store's calls take no extra operand, so the read's result
  reaches the write through the one operand every call of a binding
  takes, the token, with nothing added on the native side. ``x * 0`` is
  0, or NaN for an infinite or NaN ``x``, and XLA converts NaN to the
  integer 0, so the sum is always the token; XLA cannot prove it (``x *
  0`` is no identity for NaN), so the write waits for the read. An XLA
  that may assume no NaN (fast math) can fold it away.
  """
  return token + (x * 0).astype(token.dtype), x


def callback_hazard(ordered: bool) -> Hazard:
  """The hazard on the Python store, every call an ``io_callback``."""

  def hazard(slot, delay_us):
    with jax.named_scope("first_write"):
      token = host_store.write_slot(slot, EXPECTED, ordered=ordered)
    with jax.named_scope("read"):
      x = host_store.read_slot(token, delay_us=delay_us, ordered=ordered)
    with jax.named_scope("second_write"):
      after = host_store.write_slot(token, EXPECTED + 1, ordered=ordered)
    return x, after

  return hazard


def resource_hazard(slot, delay_us):
  """The hazard written with ``Resource``, which adds the entangle call."""
  res = Resource(jnp.asarray(slot, jnp.int32))
  res.write(_scoped("first_write", testing.write_slot), EXPECTED)
  read = functools.partial(testing.read_slot, delay_us=delay_us)
  x = res.read(_scoped("read", read))
  res.write(_scoped("second_write", testing.write_slot), EXPECTED + 1)
  return x, res.token


def in_program_order_hazard(slot, delay_us):
  """The unordered hazard under ``in_program_order``, which adds the
  entangle call the store's declarations call for (the second write after
  the read of its slot)."""
  return in_program_order(native_hazard())(slot, delay_us)


def _scoped(name: str, fn):
  """`fn`, called inside ``jax.named_scope(name)``."""

  def call(*args, **kwargs):
    with jax.named_scope(name):
      return fn(*args, **kwargs)

  return call


ORDERINGS = (
  Ordering(NONE, "no ordering", demo_ordering(_hazard.Ordering.NONE)),
  Ordering(
    BARRIER,
    "optimization_barrier",
    demo_ordering(_hazard.Ordering.OPTIMIZATION_BARRIER),
  ),
  Ordering(
    CONTROL_DEP,
    "control_dep",
    control_dep_hazard,
    missing_from_jax(*CONTROL_DEP_NAME),
  ),
  Ordering(
    PROGRAM_ORDER,
    "program_order",
    program_order_hazard,
    missing_from_jax(*PROGRAM_ORDER_NAME),
  ),
  Ordering(
    CALLBACK_UNORDERED,
    "io_callback, unordered",
    callback_hazard(False),
    python_calls=True,
  ),
  Ordering(
    CALLBACK,
    "io_callback(ordered=True)",
    callback_hazard(True),
    python_calls=True,
  ),
  Ordering(THREADED, "hand-threaded token", native_hazard(threaded_token)),
  Ordering(ENTANGLE, "entangle", demo_ordering(_hazard.Ordering.ENTANGLE)),
  Ordering(RESOURCE, "Resource", resource_hazard),
  Ordering(IN_PROGRAM_ORDER, "in_program_order", in_program_order_hazard),
)
"""Every ordering, in the order of the table."""
