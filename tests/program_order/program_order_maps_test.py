"""`in_program_order` across nested calls and devices: nested ``jit`` and
``checkpoint`` (shardings kept), ``vmap``, ``jax.export``, ``shard_map``
(backward passes in it, objects each device owns).

Every ordering test has its control: the same program without the
transform races (``testing.races`` of its compiled module is not empty),
with it races nowhere.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import export

import entangle_jax
from entangle_jax import in_program_order, testing
from tests import test_util
from tests.program_order.program_order_programs import (
  DEVICE_OPTIONS,
  ENTANGLE,
  OrderTestCase,
  calls_of,
  compiled,
  entangles,
  hazard_body,
  undeclared_calls,
  write_read_write,
)


class ProgramOrderMapsTest(OrderTestCase):
  def test_nested_jit_and_checkpoint(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      x = jax.jit(testing.read_slot)(token)
      testing.write_slot(token, 2.0)
      return jax.checkpoint(lambda x: x * testing.read_slot(slot))(x)

    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(5))), 2)
    self.assertEqual(jax.jit(in_program_order(f))(5), 2.0)

  def test_nested_jit_keeps_its_shardings(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("x"))

    @functools.partial(jax.jit, out_shardings=rows)
    def inner(slots):
      return testing.read_slot(slots)  # (XLA rejects a sharded write.)

    def f(slots):
      return inner(slots) * 2

    # Inlined, the nested jit keeps its output sharding as a constraint.
    slots = jnp.array([40, 41], jnp.int32)
    text = jax.jit(in_program_order(f)).lower(slots).as_text()
    # (sdy.sharding_constraint, or GSPMD's @Sharding custom call.)
    self.assertRegex(text, "sharding_constraint|@Sharding")
    testing.write_slot(slots, jnp.ones(2))
    out = jax.jit(in_program_order(f))(slots)
    np.testing.assert_array_equal(out, [2.0, 2.0])
    self.assertTrue(out.sharding.is_equivalent_to(rows, 1))
    self.assertEqual(testing.races(compiled(in_program_order(f), slots)), [])

  def test_vmap_outside_and_inside(self):
    slots = jnp.arange(3, dtype=jnp.int32)
    for f in (
      jax.vmap(in_program_order(write_read_write)),
      in_program_order(jax.vmap(write_read_write)),
    ):
      c = compiled(f, slots)
      self.assertEqual(testing.races(c), [])
      self.assertEqual(entangles(c), 1)
      np.testing.assert_array_equal(jax.jit(f)(slots), [1.0] * 3)

  def test_export_round_trip(self):
    f = jax.jit(in_program_order(write_read_write))
    checks = [
      *entangle_jax.export_safety_checks(),
      export.DisabledSafetyCheck.custom_call(test_util.WRITE),
      export.DisabledSafetyCheck.custom_call(test_util.READ),
    ]
    exported = export.export(f, disabled_checks=checks)(
      jax.ShapeDtypeStruct((), jnp.int32)
    )
    restored = export.deserialize(exported.serialize())
    self.assertEqual(restored.mlir_module().count(f"@{ENTANGLE}("), 1)
    self.assertEqual(restored.call(jnp.int32(8)), 1.0)
    self.assertEqual(testing.races(compiled(restored.call, jnp.int32(8))), [])

  def test_shard_map(self):
    # Undeclared targets are shared across devices by default, and nothing
    # in one module orders two devices' calls: in_program_order orders each
    # device's own calls, so the pairs left are all across devices (the
    # control: within one device, without the transform, it races).
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    write, read = undeclared_calls((1,))

    def f(slots):
      def body(s):
        token = write(s, jnp.ones(s.shape))
        x = read(token)
        write(token, jnp.full(s.shape, 2.0))
        return x

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        slots
      )

    slots = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )
    within = [
      r for r in testing.races(compiled(f, slots)) if not r.across_devices
    ]
    self.assertNotEmpty(within)
    # What it cannot order, it says, as the check does.
    with self.assertWarnsRegex(UserWarning, "may write inside a shard_map"):
      fixed = compiled(in_program_order(f), slots)
    left = testing.races(fixed)
    self.assertNotEmpty(left)
    self.assertTrue(all(r.across_devices for r in left), left)
    # The hand-written one, and one for the order value out of the body.
    self.assertEqual(entangles(fixed), 2)
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      out = jax.jit(in_program_order(f))(slots)
    np.testing.assert_array_equal(out, [1, 1])

  def test_xla_collectives_in_program_order(self):
    # The processes of a multi-process program must make their collectives
    # in one order, and XLA schedules a psum and an all_gather that nothing
    # orders as it likes, in each process apart (one that works first may
    # get the other order: tests/ways_in/across_ranks_distributed_test.py
    # runs that). in_program_order orders them as the program makes them.
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))

    def f(x):
      def body(x):
        x = jnp.sin(x) * 2.0 + x
        with jax.named_scope("reduce"):
          a = jax.lax.psum(x, "x")
        with jax.named_scope("gather"):
          b = jax.lax.all_gather(jnp.cos(x), "x")
        return a + b.sum()

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        x
      )

    x = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("x")))
    # The control: without the transform, neither comes first; nor by
    # default in one process, which schedules them once for its devices.
    for program in (f, in_program_order(f)):
      plain = compiled(program, x)
      self.assertFalse(testing.happens_before(plain, "reduce", "gather"))
      self.assertFalse(testing.happens_before(plain, "gather", "reduce"))
    # As in a process of several (jax.process_count() > 1, the default
    # there: tests/ways_in/across_ranks_distributed_test.py).
    ordered = in_program_order(f, collectives=True)
    with warnings.catch_warnings():
      # A collective's copies on the devices are the collective itself:
      # no warning of copies that may race.
      warnings.simplefilter("error")
      fixed = compiled(ordered, x)
      out = jax.jit(ordered)(x)
    self.assertTrue(testing.happens_before(fixed, "reduce", "gather"))
    np.testing.assert_allclose(out, jax.jit(f)(x), rtol=1e-6)
    with self.assertRaisesRegex(TypeError, "collectives must be"):
      in_program_order(f, collectives="yes")  # ty: ignore[no-matching-overload]

  def test_collectives_it_leaves_alone(self):
    # A collective of no elements (a pytree's empty leaf under pmean), and
    # one in a shard_map manual over some of the mesh's axes only, where an
    # entangle would not pass JAX's mesh check: left as plain jit has them
    # (each made in_program_order raise before it left them alone).
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2, 2), ("a", "b"))

    def empty_leaf(x):
      def body(x):
        grads = {"w": x, "none": jnp.zeros((0,))}
        return jax.lax.pmean(grads, ("a", "b"))["w"]

      return jax.shard_map(
        body, mesh=mesh, in_specs=P("a", "b"), out_specs=P("a", "b")
      )(x)

    def partly_manual(x):
      def body(x):
        return jax.lax.psum(x, "a")

      return jax.shard_map(
        body,
        mesh=mesh,
        in_specs=P("a", None),
        out_specs=P(None, None),
        axis_names={"a"},
      )(x)

    x = jax.device_put(
      jnp.arange(16.0).reshape(4, 4), NamedSharding(mesh, P("a", "b"))
    )
    for f in (empty_leaf, partly_manual):
      with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = jax.jit(in_program_order(f, collectives=True))(x)
      np.testing.assert_allclose(out, jax.jit(f)(x))

  def test_a_loop_in_a_shard_map_body(self):
    # The loop's carry varies over the manual axis. The transform traces
    # the body once more to see what its calls touch; there the carry
    # must vary too, or binding it with the device's slot (varying) fails
    # to trace (it did on jax 0.10, whose types say so in another field).
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    slots = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )
    write, read = calls_of("own")

    def step(s, v):
      write(s, v)
      # Of this iteration (XLA would hoist a read of `s` alone out of the
      # loop), and ordered after the write by nothing but the order.
      return v + read(s + (v * 0).astype(s.dtype))

    def scan(s):
      v = s.astype(jnp.float32)
      return jax.lax.scan(lambda v, _: (step(s, v), None), v, None, length=2)[0]

    def while_loop(s):
      # Its bound is an argument: a while loop, not a scan.
      return jax.lax.fori_loop(
        0, s[0] * 0 + 2, lambda _, v: step(s, v), s.astype(jnp.float32)
      )

    for loop in (scan, while_loop):
      with self.subTest(loop.__name__):
        f = jax.shard_map(loop, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
        self.assert_fixed(f, slots)  # The plain program races (the control).
        testing.reset_slots()
        # In program order each step reads what it wrote, doubling the
        # carry.
        np.testing.assert_array_equal(
          jax.jit(in_program_order(f))(slots), 4.0 * np.asarray(slots)
        )

  def test_a_shard_map_on_one_device_is_silent(self):
    # Its body has no copy on another device to race with; the race check
    # reports nothing there either. The control: the same body on two
    # devices is warned about.
    from jax.sharding import PartitionSpec as P

    write, read = undeclared_calls((1,))

    def on(mesh):
      def f(slots):
        def body(s):
          return read(write(s, jnp.ones(s.shape)))

        return jax.shard_map(
          body, mesh=mesh, in_specs=P("x"), out_specs=P("x")
        )(slots)

      return f

    auto = (jax.sharding.AxisType.Auto,)
    one = jax.make_mesh(
      (1,), ("x",), axis_types=auto, devices=jax.devices()[:1]
    )
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      fixed = compiled(in_program_order(on(one)), jnp.arange(11, 12))
    self.assertEqual(testing.races(fixed), [])
    two = jax.make_mesh((2,), ("x",), axis_types=auto)
    with self.assertWarnsRegex(UserWarning, "may write inside a shard_map"):
      compiled(in_program_order(on(two)), jnp.arange(11, 13))

  def test_backward_passes_in_shard_map(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    @jax.custom_vjp
    def counted_on(x, slot):
      return x * 2

    def count_on(slot, ct):
      seen = testing.read_slot(slot, delay_us=500)
      token = testing.write_slot(slot, seen + 1.0, delay_us=500)
      return (ct * 2 + token * 0, None)

    counted_on.defvjp(lambda x, slot: (x * 2, slot), count_on)

    def per_device(fn):
      return jax.shard_map(
        fn, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")
      )

    def loss(x, slots):
      # Each device's slot: 0, then 10; three backward passes count after.
      zero = jnp.zeros((1,))
      x = per_device(lambda v, s: v + testing.write_slot(s, zero) * 0)(x, slots)
      y = per_device(lambda v, s: counted_on(counted_on(v, s), s))(x, slots)
      y = per_device(lambda v, s: counted_on(v, s))(y, slots)
      ten = jnp.full((1,), 10.0)
      y = per_device(
        lambda v, s: v + testing.write_slot(s, ten, delay_us=2000) * 0
      )(y, slots)
      return y.sum()

    args = (
      jax.device_put(jnp.ones(2), sharding),
      jax.device_put(jnp.arange(40, 42, dtype=jnp.int32), sharding),
    )

    def within(c):  # Nothing in one module orders two devices' calls.
      return [r for r in testing.races(c) if not r.across_devices]

    self.assertNotEmpty(within(compiled(jax.grad(loss), *args)))
    # The store is one for every device and its slot arrays may repeat a
    # slot: the copies may race across devices, which it says.
    with self.assertWarnsRegex(UserWarning, "writes inside a shard_map"):
      fixed = compiled(jax.grad(in_program_order(loss)), *args)
    self.assertEqual(within(fixed), [])
    self.assertNotEmpty(testing.races(fixed))
    testing.reset_slots()
    np.testing.assert_array_equal(fixed(*args), [8.0, 8.0])
    np.testing.assert_array_equal(testing.slot_values()[40:42], [13.0] * 2)

  def test_shard_map_of_objects_each_device_owns_is_silent(self):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",))
    slots = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )

    def hazard_on(write, read):
      return lambda slots: jax.shard_map(
        functools.partial(hazard_body, write, read),
        mesh=mesh,
        in_specs=P("x"),
        out_specs=P("x"),
      )(slots)

    def quiet(f):
      with warnings.catch_warnings():
        warnings.simplefilter("error")
        return compiled(in_program_order(f), slots)

    # Each device its own handles (the slot array split over the devices,
    # elements declared distinct), or targets declared per device.
    split_calls = calls_of("split")
    for suffix in DEVICE_OPTIONS:
      write, read = calls_of(suffix)
      f = hazard_on(write, read)
      self.assertNotEmpty(testing.races(compiled(f, slots)))  # The control.
      self.assertEqual(testing.races(quiet(f)), [], suffix)
    # Split over some of the devices only: the devices along the other
    # axis hold the same slots, so the copies may race, and it says so.
    square = jax.make_mesh((2, 2), ("x", "y"))
    four = jax.device_put(
      jnp.arange(11, 13, dtype=jnp.int32), NamedSharding(square, P("x"))
    )

    def on_square(write, read):
      def body(s):
        return read(write(s, jnp.ones(s.shape)))

      return lambda slots: jax.shard_map(
        body, mesh=square, in_specs=P("x"), out_specs=P("x")
      )(slots)

    split = on_square(*split_calls)
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      c = compiled(in_program_order(split), four)
    self.assertTrue(any(r.across_devices for r in testing.races(c)))

    # A conditional inside the body: its calls are still on the device's
    # own slots.
    def in_cond(slots):
      def body(s):
        return jax.lax.cond(
          s[0] > 11,
          # (`+ v * 0`: the read's type varies over the devices, as v's.)
          lambda v: hazard_body(*split_calls, v) + v * 0,
          lambda v: v.astype(jnp.float32),
          s,
        )

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        slots
      )

    self.assertEqual(testing.races(quiet(in_cond)), [])

    # The control of the silence: the same program on a replicated slot
    # array may race across devices, and it says so.
    replicated = jax.device_put(slots, NamedSharding(mesh, P()))
    write, read = undeclared_calls((2,))
    with self.assertWarnsRegex(UserWarning, "shard_map"):
      jax.jit(
        in_program_order(
          lambda s: jax.shard_map(
            lambda v: read(write(v, jnp.ones(v.shape))),
            mesh=mesh,
            in_specs=P(),
            out_specs=P(),
          )(s)
        )
      ).lower(replicated)


if __name__ == "__main__":
  absltest.main()
