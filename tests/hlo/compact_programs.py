"""Programs whose optimized modules pass tuple elements around: loops and
scans that carry an example-store token, the barrier hazard, a `cond`
that returns the token, and the same under `in_program_order` and with
`Resource`. Run as a script, it compiles and runs each once, so that XLA
dumps every module (``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text``);
tests/hlo/compact_operands_test.py dumps them with jax 0.11's compact
tuple elements (``%t#k``) and without, and compares the findings.
tests/hlo/data/compact/ holds such a pair of dumps from jax 0.12.0.1.
"""

import jax
import jax.numpy as jnp

from entangle_jax import Resource, entangle, in_program_order
from entangle_jax.testing import read_slot, write_slot


def loop(slot):
  """A write and a read in a fori_loop's body, then a read and a write
  after it that nothing orders: 1 race."""

  def body(i, carry):
    token, total = carry
    token = write_slot(token, total + 1.0)
    return token, total + read_slot(token)

  token, total = jax.lax.fori_loop(0, 3, body, (slot, jnp.float32(0)))
  value = read_slot(token)
  write_slot(token, 5.0)
  return total + value


def scan_entangled(slot):
  """A scan whose body and tail entangle the token: no race."""

  def body(token, _):
    token = write_slot(token, 1.0)
    value = read_slot(token)
    return entangle(token, value), value

  token, values = jax.lax.scan(body, slot, None, length=4)
  value = read_slot(token)
  write_slot(entangle(token, value), 3.0)
  return values.sum() + value


def scan_resource(slot):
  """The same scan written with Resource: no race."""

  def body(token, _):
    res = Resource(token, name="slot")
    res.write(write_slot, 1.0)
    value = res.read(read_slot)
    return res.token, value

  token, values = jax.lax.scan(body, slot, None, length=4)
  res = Resource(token, name="slot")
  value = res.read(read_slot)
  res.write(write_slot, 3.0)
  return values.sum() + value


def barrier(slot):
  """The hazard with optimization_barrier, which orders nothing on CPU."""
  token = write_slot(slot, 1.0)
  value = read_slot(token)
  token, value = jax.lax.optimization_barrier((token, value))
  write_slot(token, 2.0)
  return value


def branch(slot, pick):
  """A cond whose branches write and return the token and a value; a read
  and a write after it that nothing orders."""

  def one(token):
    token = write_slot(token, 1.0)
    return token, read_slot(token)

  def two(token):
    return write_slot(token, 2.0), jnp.float32(0)

  token, value = jax.lax.cond(pick, one, two, slot)
  seen = read_slot(token)
  write_slot(token, 4.0)
  return value + seen


PROGRAMS = {
  "loop": (loop, (jnp.int32(0),)),
  "loop_in_program_order": (in_program_order(loop), (jnp.int32(1),)),
  "scan_entangled": (scan_entangled, (jnp.int32(2),)),
  "scan_resource": (scan_resource, (jnp.int32(3),)),
  "barrier": (barrier, (jnp.int32(4),)),
  "branch": (branch, (jnp.int32(5), jnp.bool_(True))),
}
"""Name: (function, arguments)."""


def main() -> None:
  for fn, args in PROGRAMS.values():
    jax.block_until_ready(jax.jit(fn)(*args))


if __name__ == "__main__":
  main()
