"""Random read/write sequences through `Resource`, against a Python model.

The token has one leaf per slot, so a write changes one leaf and a read
consumes one, possibly another: the multi-leaf case. Each sequence is
compiled once; its reads must return what the model of the slot store says,
the compiled module must order every pair that program order requires, and
reads between the same two writes must stay unordered.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from hypothesis import given, settings
from hypothesis import strategies as st

from entangle_jax import Resource
from entangle_jax.testing import (
  OrderAnalysis,
  read_slot,
  reset_slots,
  slot_values,
  write_slot,
)

SLOTS = (40, 41, 42)

# ("write", leaf) or ("read", leaf).
operations = st.lists(
  st.tuples(st.sampled_from(["write", "read"]), st.integers(0, len(SLOTS) - 1)),
  min_size=1,
  max_size=8,
)


def program(ops):
  """The sequence as a jit-able function of (token, values); op i's native
  call is in named scope "op{i}"."""

  def run(token, values):
    res = Resource(token)
    reads = []
    for i, (kind, leaf) in enumerate(ops):
      if kind == "write":
        res.write(write_leaf(f"op{i}", leaf), values[i])
      else:
        # XLA merges identical reads: give each its own operand.
        zero = (values[i] * 0).astype(jnp.int32)
        reads.append(res.read(read_leaf(f"op{i}", leaf), zero))
    return reads, res.token

  return run


def write_leaf(scope, leaf):
  def write(token, value):
    with jax.named_scope(scope):
      new = write_slot(token[leaf], value)
    return (*token[:leaf], new, *token[leaf + 1 :])

  return write


def read_leaf(scope, leaf):
  def read(token, zero):
    slot = token[leaf] + zero
    with jax.named_scope(scope):
      return read_slot(slot)

  return read


def model(ops, values):
  """What each read returns, and the final store, by program order."""
  store = dict.fromkeys(range(len(SLOTS)), 0.0)
  reads = []
  for i, (kind, leaf) in enumerate(ops):
    if kind == "write":
      store[leaf] = float(values[i])
    else:
      reads.append(store[leaf])
  return reads, store


def required_order(ops):
  """(i, j) for every earlier op i that op j must follow."""
  return [
    (i, j)
    for j, (kind_j, _) in enumerate(ops)
    for i, (kind_i, _) in enumerate(ops[:j])
    if kind_i == "write" or kind_j == "write"
  ]


def same_epoch_reads(ops):
  """(i, j) for reads i < j with no write between them."""
  pairs = []
  for j, (kind_j, _) in enumerate(ops):
    for i in range(j - 1, -1, -1):
      if ops[i][0] == "write":
        break
      if kind_j == "read":
        pairs.append((i, j))
  return pairs


class ResourcePropertiesTest(absltest.TestCase):
  @settings(max_examples=20, deadline=None, database=None)
  @given(operations)
  def test_matches_model(self, ops):
    reset_slots()
    token = tuple(jnp.int32(s) for s in SLOTS)
    values = jnp.arange(1.0, len(ops) + 1.0)
    compiled = jax.jit(program(ops)).lower(token, values).compile()
    reads, final = compiled(token, values)
    expected_reads, expected_store = model(ops, np.asarray(values))
    np.testing.assert_array_equal(np.asarray(reads), expected_reads)
    np.testing.assert_array_equal(final, SLOTS)
    np.testing.assert_array_equal(
      slot_values()[list(SLOTS)], [expected_store[k] for k in range(3)]
    )
    order = OrderAnalysis(compiled)
    for i, j in required_order(ops):
      self.assertTrue(
        order.happens_before(f"op{i}", f"op{j}"), f"op{i} -> op{j}: {ops}"
      )
    for i, j in same_epoch_reads(ops):
      self.assertFalse(
        order.happens_before(f"op{i}", f"op{j}"), f"op{i} -> op{j}: {ops}"
      )


if __name__ == "__main__":
  absltest.main()
