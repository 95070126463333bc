"""A payload array that is also a witness: ordered, and never copied.

`entangle((t, x), x)` or `entangle(x, x)` passes one array both as a payload
operand, which the call's result aliases, and as a witness operand, which the
call reads. XLA copies such an operand. The payload operand alone already
orders every result of the call after it, so the witness is not passed again.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import entangle
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax._src.primitive import MAX_LEAVES_PER_CALL
from entangle_jax.testing import happens_before, read_slot, write_slot
from tests.test_util import copies, custom_calls, hlo_text


def _read_then_write(order):
  """Reads the slot, lets `order(token, x)` order the token, then writes."""

  def fn(token):
    with jax.named_scope("read"):
      x = read_slot(token)
    token, x = order(token, x)
    with jax.named_scope("write"):
      write_slot(token, 2.0)
    return x

  return fn


def _compiled(fn):
  return jax.jit(fn, donate_argnums=0).lower(jnp.int32(0)).compile()


class PayloadAsWitnessTest(absltest.TestCase):
  def test_self_witness_is_not_copied(self):
    self.assertEqual(
      copies(lambda a: entangle(a, a), jnp.ones(3), donate_argnums=0), 0
    )
    # Control: a different witness leaves the donated payload uncopied too,
    # so the copies came from the repeated operand.
    self.assertEqual(
      copies(
        lambda a, w: entangle(a, w), jnp.ones(3), jnp.ones(2), donate_argnums=0
      ),
      0,
    )

  def test_self_witness_values(self):
    x = jnp.array([np.nan, -0.0, 1.5])
    for fn in (entangle, jax.jit(entangle)):
      np.testing.assert_array_equal(fn(x, x), x)
      self.assertEqual(fn(x, x).dtype, x.dtype)

  def test_witness_in_payload_orders_the_other_leaves(self):
    both = _read_then_write(lambda t, x: entangle((t, x), x))
    self.assertTrue(happens_before(_compiled(both), "read", "write"))
    # Control: without entangle the write is free to run first.
    unordered = _read_then_write(lambda t, x: (t, x))
    self.assertFalse(happens_before(_compiled(unordered), "read", "write"))

  def test_witness_in_payload_copies_no_more_than_plain_entangle(self):
    both = _read_then_write(lambda t, x: entangle((t, x), x))
    plain = _read_then_write(lambda t, x: (entangle(t, x), x))
    self.assertEqual(
      copies(both, jnp.int32(0), donate_argnums=0),
      copies(plain, jnp.int32(0), donate_argnums=0),
    )

  def test_other_chunks_still_take_the_witness(self):
    # x is a payload leaf of the first call only; the token, in the second
    # call, must still be ordered after x.
    def order(token, x):
      fillers = [jnp.float32(i) * x for i in range(MAX_LEAVES_PER_CALL - 1)]
      x, *_, token = entangle([x, *fillers, token], x)
      return token, x

    fn = _read_then_write(order)
    text = hlo_text(fn, jnp.int32(0), donate_argnums=0)
    self.assertEqual(custom_calls(text, ENTANGLE_TARGET), 2)
    self.assertTrue(happens_before(_compiled(fn), "read", "write"))


if __name__ == "__main__":
  absltest.main()
