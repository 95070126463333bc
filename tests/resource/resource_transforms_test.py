"""`Resource` under eager execution and JAX transformations.

jit and eager, vmap, grad, scan/while/cond with the token as the carry,
shard_map, sharded jit and jax.export; plus the seed hazard at run time.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import export
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import entangle_jax
from entangle_jax import Resource
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax.demo import _hazard, _resource_hazard
from entangle_jax.testing import (
  example_store,
  happens_before,
  module_text,
  read_slot,
  reset_slots,
  slot_values,
  write_slot,
)
from tests import test_util

READ = example_store.READ_SLOT_TARGET


def scoped(scope, native_call):
  def call(*args):
    with jax.named_scope(scope):
      return native_call(*args)

  return call


def write_read_write(token, a, b):
  """Returns the read (must equal `a`) and the final token; leaves `b`."""
  res = Resource(token)
  res.write(scoped("w1", write_slot), a)
  x = res.read(scoped("read", read_slot))
  res.write(scoped("w2", write_slot), b)
  return x, res.token


class RuntimeHazardTest(absltest.TestCase):
  def test_resource_is_never_wrong(self):
    self.assertEqual(_resource_hazard.count_wrong(runs=1000), 0)

  def test_control_without_resource_goes_wrong(self):
    # The same program with no ordering: the second write overtakes the read.
    # How often depends on the scheduler, so run until it shows.
    self.assertIsNotNone(_hazard.runs_until_wrong(_hazard.Ordering.NONE, 2000))

  def test_compiled_order(self):
    self.assertTrue(_resource_hazard.read_precedes_second_write())
    self.assertFalse(_hazard.read_precedes_second_write(_hazard.Ordering.NONE))


class EagerTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    reset_slots()

  def check(self, fn):
    x, token = fn(jnp.int32(2), jnp.float32(1.5), jnp.float32(2.5))
    self.assertEqual(float(x), 1.5)
    self.assertEqual(int(token), 2)
    self.assertEqual(slot_values()[2], 2.5)

  def test_eager(self):
    self.check(write_read_write)

  def test_disable_jit(self):
    with jax.disable_jit():
      self.check(jax.jit(write_read_write))

  def test_python_scalar_token(self):
    res = Resource(6)
    res.write(write_slot, 4.0)
    self.assertEqual(float(res.read(read_slot)), 4.0)


class LoopsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    reset_slots()

  def test_scan_with_the_token_as_carry(self):
    def body(token, ab):
      x, token = write_read_write(token, *ab)
      return token, x

    values = jnp.arange(1.0, 6.0)
    scan = jax.jit(lambda t, a, b: jax.lax.scan(body, t, (a, b)))
    token, xs = scan(jnp.int32(3), values, values * 10)
    np.testing.assert_array_equal(xs, values)
    self.assertEqual(int(token), 3)
    self.assertEqual(slot_values()[3], 50.0)
    compiled = scan.lower(jnp.int32(3), values, values).compile()
    self.assertTrue(happens_before(compiled, "w1", READ))
    self.assertTrue(happens_before(compiled, READ, "w2"))

  def test_scan_control_without_resource(self):
    def body(token, ab):
      a, b = ab
      scoped("w1", write_slot)(token, a)
      x = scoped("read", read_slot)(token)
      scoped("w2", write_slot)(token, b)
      return token, x

    values = jnp.arange(1.0, 6.0)
    scan = jax.jit(lambda t, a, b: jax.lax.scan(body, t, (a, b)))
    compiled = scan.lower(jnp.int32(3), values, values).compile()
    self.assertFalse(happens_before(compiled, "w1", READ))
    # XLA even hoists the read, which depends on nothing in the loop, out of
    # it: every step sees the slot as it was before the loop.
    _, xs = scan(jnp.int32(3), values, values * 10)
    self.assertFalse(np.array_equal(xs, values))

  def test_while_loop_with_the_token_as_carry(self):
    def body(carry):
      i, token, total = carry
      x, token = write_read_write(token, i * 1.0, i * 10.0)
      return i + 1, token, total + x

    @jax.jit
    def loop(token):
      return jax.lax.while_loop(
        lambda c: c[0] < 5, body, (0, token, jnp.float32(0))
      )

    _, token, total = loop(jnp.int32(4))
    self.assertEqual(int(token), 4)
    self.assertEqual(float(total), 0.0 + 1 + 2 + 3 + 4)
    self.assertEqual(slot_values()[4], 40.0)

  def test_cond_with_the_token_as_operand(self):
    @jax.jit
    def branchy(pred, token):
      def write_read(t):
        return write_read_write(t, 1.0, 2.0)

      def read_only(t):
        res = Resource(t)
        return res.read(read_slot), res.token

      return jax.lax.cond(pred, write_read, read_only, token)

    x, _ = branchy(True, jnp.int32(5))
    self.assertEqual(float(x), 1.0)
    x, _ = branchy(False, jnp.int32(5))
    self.assertEqual(float(x), 2.0)


class VmapGradTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    reset_slots()

  def test_vmap_over_several_slots(self):
    slots = jnp.arange(8, 12, dtype=jnp.int32)
    a = jnp.arange(4.0)
    step = jax.jit(jax.vmap(write_read_write))
    x, token = step(slots, a, a + 100)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_array_equal(token, slots)
    np.testing.assert_array_equal(slot_values()[8:12], a + 100)
    compiled = step.lower(slots, a, a).compile()
    self.assertTrue(happens_before(compiled, "w1", READ))
    self.assertTrue(happens_before(compiled, READ, "w2"))

  def test_vmap_unbatched_token_batched_arguments(self):
    # Every batch element writes the one slot, in index order.
    x, _ = jax.vmap(write_read_write, in_axes=(None, 0, 0))(
      jnp.int32(7), jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0])
    )
    np.testing.assert_array_equal(x, [2.0, 2.0])
    self.assertEqual(slot_values()[7], 4.0)

  def test_grad_through_reads(self):
    # The token (slot, scale) has a float leaf: derivatives flow through the
    # token, through entangle as the identity, and through reads that use
    # it; read outputs, as witnesses, get no derivative from the ordering.
    def f(scale, slot):
      res = Resource((slot, scale))

      def write(token, value):
        return write_slot(token[0], value), token[1]

      def scaled_read(token):
        return read_slot(token[0]) * token[1]

      res.write(write, 3.0)
      x = res.read(scaled_read)
      res.write(write, 5.0)
      y = res.read(scaled_read)
      return x + y

    grad = jax.jit(jax.grad(f))(jnp.float32(2.0), jnp.int32(1))
    self.assertEqual(float(grad), 3.0 + 5.0)
    self.assertEqual(float(jax.grad(f)(jnp.float32(2.0), jnp.int32(1))), 8.0)

  def test_grad_of_a_written_value_needs_stop_gradient(self):
    # The example write has no derivative rule; the read value is a
    # constant to grad, so d(read * v)/dv is the read.
    def f(v, slot):
      x, _ = write_read_write(slot, jax.lax.stop_gradient(v), 0.0)
      return x * v

    self.assertEqual(float(jax.jit(jax.grad(f))(jnp.float32(4.0), 1)), 4.0)
    with self.assertRaisesRegex(
      (ValueError, NotImplementedError), "ifferentiat"
    ):
      jax.grad(lambda v: write_read_write(1, v, 0.0)[0])(jnp.float32(4.0))


class ShardingExportTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    reset_slots()
    self.mesh = jax.make_mesh((test_util.NUM_CPU_DEVICES,), ("x",))
    sharded = NamedSharding(self.mesh, P("x"))
    self.slots = jax.device_put(jnp.arange(16, 24, dtype=jnp.int32), sharded)
    self.a = jax.device_put(jnp.arange(8.0), sharded)
    self.b = jax.device_put(jnp.arange(8.0) + 100, sharded)

  def check(self, fn):
    x, token = fn(self.slots, self.a, self.b)
    np.testing.assert_array_equal(x, self.a)
    np.testing.assert_array_equal(token, self.slots)
    np.testing.assert_array_equal(slot_values()[16:24], self.b)
    compiled = fn.lower(self.slots, self.a, self.b).compile()
    self.assertTrue(happens_before(compiled, "w1", READ))
    self.assertTrue(happens_before(compiled, READ, "w2"))
    self.assertNotIn("all-gather", module_text(compiled))

  def per_device(self, native_call):
    return jax.shard_map(
      native_call, mesh=self.mesh, in_specs=P("x"), out_specs=P("x")
    )

  def test_inside_shard_map(self):
    self.check(jax.jit(self.per_device(write_read_write)))

  def test_sharded_jit(self):
    # Resource at the jit level on a sharded token; each device's native
    # calls in shard_map (XLA's partitioner rejects a side-effecting custom
    # call that has no sharding of its own).
    def step(token, a, b):
      res = Resource(token)
      res.write(self.per_device(scoped("w1", write_slot)), a)
      x = res.read(self.per_device(read_slot))
      res.write(self.per_device(scoped("w2", write_slot)), b)
      return x, res.token

    sharded = NamedSharding(self.mesh, P("x"))
    self.check(jax.jit(step, in_shardings=(sharded,) * 3))

  def test_export(self):
    checks = entangle_jax.export_safety_checks() + [
      export.DisabledSafetyCheck.custom_call(target)
      for target in (example_store.WRITE_SLOT_TARGET, READ)
    ]
    slots, a = jnp.arange(16, 24, dtype=jnp.int32), jnp.arange(8.0)
    exported = export.export(jax.jit(write_read_write), disabled_checks=checks)(
      slots, a, a
    )
    self.assertEqual(exported.mlir_module().count(ENTANGLE_TARGET), 1)
    restored = export.deserialize(exported.serialize())
    x, token = restored.call(slots, a, a + 100)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_array_equal(token, slots)
    np.testing.assert_array_equal(slot_values()[16:24], a + 100)


if __name__ == "__main__":
  absltest.main()
