"""Property tests: random pytrees, dtypes and shapes round-trip exactly."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl.testing import absltest
from hypothesis import given, settings
from hypothesis import strategies as st

from entangle_jax import entangle
from tests.test_util import assert_same_tree

_DTYPES = [
  np.bool_,
  np.int8,
  np.uint16,
  np.int32,
  np.float16,
  np.float32,
  np.complex64,
  ml_dtypes.bfloat16,
  ml_dtypes.int4,
  ml_dtypes.float8_e4m3fn,
]

shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def arrays(draw):
  dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
  shape = draw(shapes)
  size = int(np.prod(shape, dtype=np.int64))
  raw = draw(st.binary(min_size=size, max_size=size))
  bits = np.frombuffer(raw, np.uint8).reshape(shape)
  if dtype.itemsize == 1 and dtype != np.bool_:
    values = bits.view(dtype)
  else:
    values = bits.astype(dtype)
  return jnp.asarray(values)


def trees(leaves):
  return st.recursive(
    leaves,
    lambda children: st.one_of(
      st.lists(children, max_size=3),
      st.tuples(children, children),
      st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
    ),
    max_leaves=6,
  )


def same_bits(a, b) -> bool:
  a, b = np.asarray(a), np.asarray(b)
  return (
    a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
  )


class PropertiesTest(absltest.TestCase):
  @settings(max_examples=40, deadline=None, database=None)
  @given(
    payload=trees(arrays()), witnesses=st.lists(trees(arrays()), max_size=3)
  )
  def test_random_trees_round_trip(self, payload, witnesses):
    leafless_payload = not jax.tree_util.tree_leaves(payload)
    leafless_witnesses = bool(witnesses) and not jax.tree_util.tree_leaves(
      witnesses
    )
    if leafless_payload or leafless_witnesses:
      # Nothing could carry the order, or nothing to wait for: named.
      with self.assertRaisesRegex(TypeError, "no array leaves"):
        jax.jit(entangle)(payload, *witnesses)
      return
    out = jax.jit(entangle)(payload, *witnesses)
    assert_same_tree(self, out, payload, same_bits)

  @settings(max_examples=25, deadline=None, database=None)
  @given(payload=arrays(), witness=arrays(), batch=st.integers(1, 4))
  def test_vmap_matches_unbatched(self, payload, witness, batch):
    stacked = jnp.stack([payload] * batch)
    out = jax.vmap(entangle, in_axes=(0, None))(stacked, witness)
    self.assertTrue(same_bits(out, stacked))


if __name__ == "__main__":
  absltest.main()
