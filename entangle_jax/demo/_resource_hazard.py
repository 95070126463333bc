"""The seed example's hazard written with `Resource`, for the demo and tests.

The same program as ``_hazard.program(Ordering.ENTANGLE)``, with ``Resource``
adding the ``entangle`` call instead of a hand-written one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from entangle_jax import Resource, testing
from entangle_jax.demo import _hazard


def program():
  """The hazard as a function of ``(slot, delay_input)`` returning the read.

  Ops are named with ``jax.named_scope`` as in ``_hazard.program``:
  "first_write", "read" and "second_write".
  """

  def hazard(slot, delay_input):
    res = Resource(slot)
    res.write(_first_write, jnp.full(slot.shape, _hazard.EXPECTED))
    # Always 0, but XLA cannot know: multiplying by zero is no identity for NaN.
    delay = (jnp.sum(jnp.sin(delay_input)) * 0).astype(jnp.int32)
    x = res.read(_delayed_read, delay)
    res.write(_second_write, jnp.full(slot.shape, _hazard.EXPECTED + 1))
    return x

  return hazard


def _first_write(token, value):
  with jax.named_scope("first_write"):
    return testing.write_slot(token, value)


def _delayed_read(token, delay):
  with jax.named_scope("read"):
    return testing.read_slot(token + delay)


def _second_write(token, value):
  with jax.named_scope("second_write"):
    return testing.write_slot(token, value)


def count_wrong(runs: int, slot: int = 0) -> int:
  """Runs the compiled hazard `runs` times; counts reads that missed 1.0."""
  return _hazard.count_wrong_of(program(), runs, slot)


def compiled() -> jax.stages.Compiled:
  """The hazard, compiled for ``_hazard.arguments()``."""
  return _hazard.compile_hazard(program())


def read_precedes_second_write() -> bool:
  """Whether the compiled hazard orders the read before the second write."""
  return _hazard.orders_read_first(compiled())
