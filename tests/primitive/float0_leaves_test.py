"""float0 leaves: the tangents of integers, as `grad(..., allow_int=True)`
returns them. JAX represents them as NumPy-backed arrays, not `jax.Array`s,
so entangle's eager device check must not ask them for devices."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from entangle_jax import entangle


def _float0(shape):
  return np.zeros(shape, jax.dtypes.float0)


def _int_grads():
  """`grad` with `allow_int`: a float32 gradient and a float0 one."""
  return jax.grad(lambda x, i: (x * i).sum(), argnums=(0, 1), allow_int=True)(
    jnp.ones(3), jnp.int32(2)
  )


class Float0LeavesTest(parameterized.TestCase):
  def test_float0_really_is_no_jax_array(self):
    # The premise of the tests below: if JAX ever makes float0 a jax.Array,
    # the eager path no longer differs from any other leaf.
    self.assertNotIsInstance(jnp.asarray(_float0((2,))), jax.Array)
    self.assertEqual(_int_grads()[1].dtype, jax.dtypes.float0)

  @parameterized.named_parameters(
    ("eager", entangle),
    ("jit", jax.jit(entangle)),
  )
  def test_float0_payload(self, fn):
    result = fn(_float0((2,)), jnp.ones(3))
    self.assertEqual(result.dtype, jax.dtypes.float0)
    self.assertEqual(result.shape, (2,))

  @parameterized.named_parameters(
    ("eager", entangle),
    ("jit", jax.jit(entangle)),
  )
  def test_float0_witness(self, fn):
    result = fn(jnp.arange(3.0), _float0((4,)))
    np.testing.assert_array_equal(result, jnp.arange(3.0))

  def test_under_disable_jit(self):
    with jax.disable_jit():
      result = entangle({"z": _float0(()), "x": jnp.ones(2)}, jnp.ones(3))
    self.assertEqual(result["z"].dtype, jax.dtypes.float0)
    np.testing.assert_array_equal(result["x"], jnp.ones(2))

  def test_gradients_with_integer_inputs_eagerly(self):
    # What a user meets: ordering a tree of gradients after some value.
    grads = _int_grads()
    result = entangle(grads, jnp.ones(3))
    np.testing.assert_array_equal(result[0], grads[0])
    self.assertEqual(result[1].dtype, jax.dtypes.float0)

  def test_committed_leaves_are_still_checked(self):
    # Control: skipping float0 leaves must not skip the device check itself.
    devices = jax.devices()
    payload = jax.device_put(jnp.ones(2), devices[0])
    witness = jax.device_put(jnp.ones(2), devices[1])
    with self.assertRaisesRegex(ValueError, r"payload.*witnesses\[0\]"):
      entangle({"z": _float0(()), "p": payload}, witness)


if __name__ == "__main__":
  absltest.main()
