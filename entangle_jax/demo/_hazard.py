"""The seed example's hazard, as a program the tests and the demo both run.

``write(slot, 1); x = read(token); write(token, 2)``: the read must see 1.0.
Nothing but a data dependency orders the read before the second write. The
read also waits on some unrelated arithmetic, as real code would, which makes
an unordered schedule run the second write first.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp

from entangle_jax import entangle, testing

EXPECTED = 1.0
"""What the read sees when it runs before the second write."""

# Enough arithmetic in front of the read to let an unordered schedule pass it.
DELAY_SIZE = 100_000


class Ordering(enum.Enum):
  """How the program tries to order the read before the second write."""

  NONE = "no ordering"
  OPTIMIZATION_BARRIER = "optimization_barrier"
  ENTANGLE = "entangle"


def order_after_read(ordering: Ordering, token, x, payload=(), witness=None):
  """``(token, payload, x)`` with `token` and `payload` ordered after the
  read's result `x` as `ordering` says (``entangle`` takes ``witness(x)``
  as its witness, `x` itself by default); the barrier passes `x` on too."""
  if ordering is Ordering.ENTANGLE:
    token, payload = entangle(
      (token, payload), x if witness is None else witness(x)
    )
  elif ordering is Ordering.OPTIMIZATION_BARRIER:
    token, x = jax.lax.optimization_barrier((token, x))
  return token, payload, x


def program(ordering: Ordering, witness=None):
  """The hazard as a function of ``(slot, delay_input)`` returning the read.

  ``slot`` may be an array of slot ids (each element is one hazard); the
  read's result has its shape. `witness` is for `order_after_read`.

  Ops are named with ``jax.named_scope``: "first_write", "read" and
  "second_write", for ``entangle_jax.testing.happens_before``.
  """

  def hazard(slot, delay_input):
    with jax.named_scope("first_write"):
      token = testing.write_slot(slot, jnp.full(slot.shape, EXPECTED))
    # Always 0, but XLA cannot know: multiplying by zero is no identity for NaN.
    delay = (jnp.sum(jnp.sin(delay_input)) * 0).astype(jnp.int32)
    with jax.named_scope("read"):
      x = testing.read_slot(token + delay)
    token, _, x = order_after_read(ordering, token, x, witness=witness)
    with jax.named_scope("second_write"):
      testing.write_slot(token, jnp.full(slot.shape, EXPECTED + 1))
    return x

  return hazard


def arguments(slot: int = 0):
  return jnp.int32(slot), jnp.ones(DELAY_SIZE, jnp.float32)


def count_wrong(ordering: Ordering, runs: int, slot: int = 0) -> int:
  """Runs the compiled hazard `runs` times; counts reads that missed 1.0."""
  return count_wrong_of(program(ordering), runs, slot)


def count_wrong_of(hazard, runs: int, slot: int = 0) -> int:
  """`count_wrong` for any program of the hazard's signature (the Resource
  version in ``_resource_hazard``, say)."""
  compiled = jax.jit(hazard)
  args = arguments(slot)
  results = [compiled(*args) for _ in range(runs)]
  return sum(int(r != EXPECTED) for r in jax.device_get(results))


def runs_until_wrong(
  ordering: Ordering, max_runs: int, batch: int = 20, slot: int = 0
) -> int | None:
  """Runs the compiled hazard until a read misses 1.0, at most `max_runs`
  times; returns how many runs that took, or None if every read was right.

  Nothing obliges XLA to run an unordered program in the wrong order, so a
  fixed number of runs can miss the hazard by chance; running until it shows
  (in batches, so runs still overlap as in `count_wrong`) keeps a control
  experiment cheap where the hazard is frequent and sound where it is rare.
  """
  return runs_until_wrong_of(jax.jit(program(ordering)), max_runs, batch, slot)


def runs_until_wrong_of(
  run, max_runs: int, batch: int = 20, slot: int = 0
) -> int | None:
  """`runs_until_wrong` for any callable of the hazard's signature: a jitted
  or compiled program (a variant of the hazard, say)."""
  args = arguments(slot)
  done = 0
  while done < max_runs:
    size = min(batch, max_runs - done)
    results = jax.device_get([run(*args) for _ in range(size)])
    for index, result in enumerate(results):
      if result != EXPECTED:
        return done + index + 1
    done += size
  return None


def compiled(ordering: Ordering) -> jax.stages.Compiled:
  """The hazard with `ordering`, compiled for `arguments()`."""
  return compile_hazard(program(ordering))


def read_precedes_second_write(ordering: Ordering) -> bool:
  """Whether the compiled hazard orders the read before the second write."""
  return orders_read_first(compiled(ordering))


def compile_hazard(hazard) -> jax.stages.Compiled:
  """A program of the hazard's signature, compiled for `arguments()`."""
  return jax.jit(hazard).lower(*arguments()).compile()


def orders_read_first(compiled: jax.stages.Compiled) -> bool:
  """Whether a compiled hazard orders the read before the second write."""
  return testing.happens_before(compiled, "read", "second_write")
