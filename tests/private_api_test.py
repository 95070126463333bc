"""Guards the private JAX API that sharded lowering depends on."""

from absl.testing import absltest
from jax._src import dispatch

from entangle_jax import _partitioning, _primitive
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)


class PrivateApiTest(absltest.TestCase):
  def test_device_assignment_set_exists_and_holds_entangle(self):
    # custom_partitioning asserts without a device assignment at lowering
    # time; JAX hands one only to primitives in this (private) set.
    self.assertIs(
      _partitioning.PRIVATE_DEVICE_SET,
      dispatch.prim_requires_devices_during_lowering,
    )
    self.assertIn(
      _primitive.entangle_p, dispatch.prim_requires_devices_during_lowering
    )

  def test_sharding_rule_mirrors_each_payload(self):
    self.assertEqual(
      _partitioning.sharding_rule((2, 0, 1), num_payload=2),
      "a0 a1, , c0 -> a0 a1, ",
    )


if __name__ == "__main__":
  absltest.main()
