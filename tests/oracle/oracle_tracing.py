"""Generated oracle programs as JAX code: `function` traces a
`oracle_programs.Program` into calls, loops, conditionals and callbacks."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from entangle_jax import entangle, testing
from entangle_jax.testing import example_store
from tests.oracle.oracle_programs import (
  BASE_BITS,
  BIG,
  ITERATION_BASE,
  Branch,
  Call,
  Loop,
  Program,
  value_dtypes,
)


def function(program: Program):
  """`program` as a function of ``base``, an int32 whose low
  `oracle_programs.BASE_BITS` bits pick the branches."""

  def traced(base):
    big = testing.write_slot(
      np.zeros((BIG,), np.int32), np.zeros((BIG,), np.float32)
    )
    return [*_run_block(program.statements, [], 0, base), big]

  return traced


CALLBACK_EVENTS: list[tuple[int, int, int, int]] = []
"""``(tag, iteration, start, end)`` of each host callback that ran."""


def _host_callback(tag: int, delay_us: int):
  def callback(iteration, *witnesses):
    del witnesses  # Only their order matters.
    start = example_store.next_sequence_number()
    if delay_us:
      time.sleep(delay_us * 1e-6)
    end = example_store.next_sequence_number()
    CALLBACK_EVENTS.append((tag, int(iteration), start, end))
    return np.zeros((2,), np.float32)

  return callback


def _run_call(call: Call, values, iteration):
  witnesses = [values[w] for w in call.witnesses]
  if call.kind == "callback":
    with jax.named_scope(f"op{call.tag}"):
      return io_callback(
        _host_callback(call.tag, call.delay_us),
        jax.ShapeDtypeStruct((2,), jnp.float32),
        jnp.asarray(iteration, jnp.int32),
        *witnesses,
        ordered=False,
      )
  if isinstance(iteration, int):
    ids = jnp.asarray(np.array([call.tag, iteration], np.int32))
  else:
    ids = jnp.asarray(np.array([call.tag, 0], np.int32))
    ids = ids + jnp.asarray(np.array([0, 1], np.int32)) * iteration
  if witnesses:
    ids = entangle(ids, *witnesses)
  with jax.named_scope(f"op{call.tag}"):
    if call.kind == "write":
      value = np.array([call.tag, 0.5], np.float32)
      return testing.write_slot(ids, value, delay_us=call.delay_us)
    return testing.read_slot(ids, delay_us=call.delay_us)


def _run_block(statements, values, iteration, base) -> list:
  """`values` followed by the values that `statements` make."""
  values = list(values)
  for s in statements:
    if isinstance(s, Call):
      values.append(_run_call(s, values, iteration))
    elif isinstance(s, Loop):
      values += _run_loop(s, values, iteration, base)
    else:
      values += _run_branch(s, values, iteration, base)
  return values


def _filler(dtype):
  """A stand-in value. Not all equal: XLA:CPU would make an equal-valued
  constant a broadcast, a kernel to compile."""
  return jnp.asarray(np.array([0, 1], dtype))


def _run_loop(loop: Loop, outer, iteration, base) -> list:
  def predicate(i, made, first: bool):
    """Whether to run iteration `i`, `made` being the last one's values. A
    bare predicate reads the earlier value only before the first one."""
    going = i < loop.trips
    if loop.predicate_input is not None and (first or not loop.bare):
      going = going & (outer[loop.predicate_input][0] > -1)
    if loop.predicate_state is not None:
      going = going & (made[loop.predicate_state][0] > -1)
    return going

  def condition(state):
    i, going, made = state
    if loop.bare:
      return going  # the predicate is a state element, as it is
    going = predicate(i, made, first=False)
    if loop.condition_call is not None:
      seen = _run_call(
        loop.condition_call, outer, iteration * ITERATION_BASE + i
      )
      going = going & (seen[0] > -1)
    return going

  def body(state):
    i, _, previous = state
    visible = [*outer, *previous[: loop.sees]]
    made = _run_block(loop.body, visible, iteration * ITERATION_BASE + i, base)
    made = tuple(made[len(visible) :])
    return i + 1, predicate(i + 1, made, first=False), made

  start = tuple(_filler(d) for d in value_dtypes(loop.body))
  first = predicate(jnp.int32(0), start, first=True)
  _, _, made = jax.lax.while_loop(condition, body, (jnp.int32(0), first, start))
  return list(made)


def _run_branch(branch: Branch, values, iteration, base) -> list:
  bit = (base >> (branch.number % BASE_BITS)) + iteration
  predicate = bit % 2 == 0
  if branch.predicate_input is not None:
    predicate = predicate ^ (values[branch.predicate_input][0] > 1e9)
  first, second = branch.branches
  first_filler = [_filler(d) for d in value_dtypes(first)]
  second_filler = [_filler(d) for d in value_dtypes(second)]

  def run_first():
    made = _run_block(first, values, iteration, base)[len(values) :]
    return tuple(made + second_filler)

  def run_second():
    made = _run_block(second, values, iteration, base)[len(values) :]
    return tuple(first_filler + made)

  return list(jax.lax.cond(predicate, run_first, run_second))
