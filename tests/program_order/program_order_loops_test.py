"""`in_program_order` in loops and conditionals: ``scan`` (over slots, carrying
the token, a step as many entangles as with ``Resource``), ``while_loop``
(its body and its condition) and ``cond``.

Every ordering test has its control: the same program without the
transform races (``testing.races`` of its compiled module is not empty),
with it races nowhere.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

import entangle_jax
from entangle_jax import in_program_order, testing

try:  # The benchmark's count of entangle calls a step, tested here.
  from benchmarks.parts.program_order_time import loop_entangles
except (
  ModuleNotFoundError
) as missing:  # A copy of tests/ away from the checkout.
  if missing.name != "benchmarks":
    raise
  loop_entangles = None


from tests.program_order.program_order_programs import (
  OrderTestCase,
  compiled,
  entangles,
)


class ProgramOrderLoopsTest(OrderTestCase):
  def test_scan(self):
    def f(x):
      def body(c, _):
        r = testing.read_slot(2)
        testing.write_slot(2, r + 1.0)
        return c, r

      testing.write_slot(2, 0.0)
      return jax.lax.scan(body, x, None, length=4)[1]

    # The order value in the carry is the write's result: one entangle
    # (the read after the last write, before or in the loop) per step.
    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(0))), 1)
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(0), [0.0, 1.0, 2.0, 3.0]
    )

  def test_a_scan_step_takes_as_many_entangles_as_with_resource(self):
    if loop_entangles is None:
      self.skipTest("no benchmarks/ package: tests/ runs from a copy")

    # The benchmark's scan program: each step a hazard, the second write's
    # token the next step's slot. Written with Resource, and unordered under
    # in_program_order: as many entangle calls in the loop body (one per
    # step), and none outside it. With two reads between the writes too.
    def scan_of(hazard):
      def program(slot):
        def step(token, _):
          x, token = hazard(token)
          return token, x

        return jax.lax.scan(step, slot, None, length=50)

      return program

    def unordered(reads):
      def hazard(token):
        token = testing.write_slot(token, 1.0)
        x = sum(testing.read_slot(token) for _ in range(reads))
        return x, testing.write_slot(token, 2.0)

      return hazard

    def with_resource(reads):
      def hazard(token):
        res = entangle_jax.Resource(token)
        res.write(testing.write_slot, 1.0)
        x = sum(res.read(testing.read_slot) for _ in range(reads))
        res.write(testing.write_slot, 2.0)
        return x, res.token

      return hazard

    slot = jnp.int32(22)
    for reads in (1, 2):
      racy = compiled(scan_of(unordered(reads)), slot)
      # The control: unordered, it races, and the loop body has none.
      self.assertNotEmpty(testing.races(racy))
      self.assertEqual(loop_entangles(racy), 0)
      resource = compiled(scan_of(with_resource(reads)), slot)
      fixed = compiled(in_program_order(scan_of(unordered(reads))), slot)
      self.assertEqual(testing.races(resource), [])
      self.assertEqual(testing.races(fixed), [])
      self.assertEqual(loop_entangles(resource), 1)
      self.assertEqual(loop_entangles(fixed), loop_entangles(resource))
      self.assertEqual(entangles(fixed), entangles(resource))
      run = jax.jit(in_program_order(scan_of(unordered(reads))))
      np.testing.assert_array_equal(run(slot)[1], [float(reads)] * 50)

  def test_scan_carrying_the_token_needs_no_order_value(self):
    def f(slot):
      def body(token, _):
        r = testing.read_slot(token)
        token = testing.write_slot(token, 5.0)  # after the read: 1 entangle
        return testing.write_slot(token, r + 1.0), r

      return jax.lax.scan(body, testing.write_slot(slot, 0.0), None, length=3)

    fixed = self.assert_fixed(f, jnp.int32(1))
    self.assertEqual(entangles(fixed), 1)  # As Resource needs per step.
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(1)[1], [0.0, 1.0, 2.0]
    )

  def test_scan_over_slots(self):
    # The slots come in as xs: traced, so any two may be one.
    def f(slots):
      def body(c, slot):
        token = testing.write_slot(slot, 1.0)
        r = testing.read_slot(token, delay_us=100)
        testing.write_slot(16, 2.0)
        return c, r

      return jax.lax.scan(body, 0, slots)[1]

    slots = jnp.array([16, 16, 17], jnp.int32)
    self.assert_fixed(f, slots)
    np.testing.assert_array_equal(
      jax.jit(in_program_order(f))(slots), [1.0, 1.0, 1.0]
    )

  def test_while_loop(self):
    def f(x):
      testing.write_slot(3, 0.0)

      def body(c):
        r = testing.read_slot(3)
        testing.write_slot(3, r + 1.0)
        return c + 1

      n = jax.lax.while_loop(lambda c: c < 4, body, x)
      return testing.read_slot(3), n

    # One in the body, one for the read after the loop.
    self.assertEqual(entangles(self.assert_fixed(f, jnp.int32(0))), 2)
    self.assertEqual(jax.jit(in_program_order(f))(0)[0], 4.0)

  def test_while_loop_reading_in_its_condition(self):
    def f(x):
      testing.write_slot(18, 0.0)

      def body(c):
        testing.write_slot(18, c.astype(jnp.float32) + 1.0)
        return c + 1

      n = jax.lax.while_loop(lambda c: testing.read_slot(18) < 3.0, body, x)
      testing.write_slot(18, 9.0)
      return n

    self.assert_fixed(f, jnp.int32(0))
    self.assertEqual(jax.jit(in_program_order(f))(0), 3)

  def test_cond(self):
    def f(p):
      testing.write_slot(4, 1.0)
      x = jax.lax.cond(p, lambda: testing.read_slot(4), lambda: 7.0)
      testing.write_slot(4, 2.0)
      return x

    # As by hand: the read after the write, the write after the cond.
    self.assertEqual(entangles(self.assert_fixed(f, True)), 2)
    self.assertEqual(jax.jit(in_program_order(f))(True), 1.0)


if __name__ == "__main__":
  absltest.main()
