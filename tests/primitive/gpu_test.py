"""Ordering on a CUDA GPU; skipped (with the reason) where JAX sees none."""

import time
import unittest

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from entangle_jax.testing import example_store


def skip_reason() -> str:
  """Why the GPU tests cannot run here; empty when they can.

  Called when the tests run, never at import: asking JAX for its devices
  starts its backends, after which no test module can set the device count.
  """
  if not testing.has_cuda_device():
    return f"no CUDA GPU: JAX sees {jax.devices()}"
  if example_store.load_cuda() is None:
    return "entangle_jax was built without its CUDA example resource"
  return ""


class GpuHazardTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    reason = skip_reason()
    if reason:
      raise unittest.SkipTest(reason)

  def setUp(self):
    super().setUp()
    testing.reset_slots()

  def test_entangle_orders_on_gpu(self):
    self.assertEqual(_hazard.count_wrong(Ordering.ENTANGLE, runs=1000), 0)
    self.assertTrue(_hazard.read_precedes_second_write(Ordering.ENTANGLE))

  def test_unordered_program_has_no_edge_on_gpu(self):
    self.assertFalse(_hazard.read_precedes_second_write(Ordering.NONE))

  def test_example_resource_on_gpu(self):
    token = testing.write_slot(3, 1.5)
    self.assertEqual(float(testing.read_slot(token)), 1.5)

  def test_a_delayed_call_takes_its_delay_on_the_stream(self):
    call = jax.jit(
      lambda s: testing.read_slot(
        testing.write_slot(s, 2.5, delay_us=50_000), delay_us=50_000
      )
    )
    jax.block_until_ready(call(jnp.int32(5)))  # compiled
    start = time.perf_counter()
    self.assertEqual(float(call(jnp.int32(5))), 2.5)
    self.assertGreaterEqual(time.perf_counter() - start, 0.1)


if __name__ == "__main__":
  absltest.main()
