"""Runs of a program of the example store's slot calls, shared by the race
check's tests of user-shaped programs (user_programs_test,
selects_and_tables_test): its value in program order (under
``jax.disable_jit``, each call as written), its values jitted, and the
check's answer on its lowering. Each program takes the slot's index."""

import jax
import jax.numpy as jnp

from entangle_jax.testing import races, reset_slots

SLOT = 3


def program_order_value(fn):
  """`fn`'s value with every call run in the order written."""
  reset_slots()
  with jax.disable_jit():
    return jax.tree.map(float, fn(jnp.int32(SLOT)))


def jit_values(fn, times=3):
  """`fn`'s value jitted, `times` times, the slots reset before each."""
  jitted = jax.jit(fn)
  values = []
  for _ in range(times):
    reset_slots()
    values.append(jax.tree.map(float, jitted(jnp.int32(SLOT))))
  return values


def races_of(fn):
  """The race check's pairs on `fn`'s lowering."""
  return races(jax.jit(fn).lower(jnp.int32(SLOT)))
