"""entangle under transformations (vmap, grad, jvp, jet, scan...), eagerly,
and as one custom call in every transformed program."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax.experimental import jet

from entangle_jax import entangle
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax.testing import (
  happens_before,
  module_text,
  read_slot,
  write_slot,
)
from tests.test_util import (
  NUM_CPU_DEVICES,
  custom_calls,
  hlo_text,
  identity,
  lowered_text,
)


class TransformationsTest(parameterized.TestCase):
  def test_vmap_is_one_call_on_batched_operands(self):
    def fn(p, w):
      return jax.vmap(entangle, in_axes=(1, None), out_axes=1)(p, w)

    payload, witness = jnp.arange(12.0).reshape(3, 4), jnp.ones(2)
    np.testing.assert_array_equal(jax.jit(fn)(payload, witness), payload)
    text = hlo_text(fn, payload, witness)
    self.assertEqual(custom_calls(text, ENTANGLE_TARGET), 1)
    self.assertNotIn(" while(", text)

  def test_vmap_leaves_unbatched_leaves_unbatched(self):
    def fn(a, b, w):
      return jax.vmap(lambda a, w: entangle((a, b), w))(a, w)

    args = (jnp.ones((4, 2)), jnp.float32(3), jnp.ones((4, 5)))
    (eqn,) = [
      e
      for e in jax.make_jaxpr(fn)(*args).eqns
      if e.primitive.name == "entangle"
    ]
    self.assertEqual([v.aval.shape for v in eqn.invars], [(4, 2), (), (4, 5)])
    out = fn(*args)
    np.testing.assert_array_equal(out[1], jnp.full(4, 3.0))

  def test_grad_is_identity_for_payload_and_zero_for_witness(self):
    def loss(x, w):
      return jnp.sum(jnp.sin(entangle(x, w)))

    x, w = jnp.arange(3.0), jnp.arange(2.0)
    gx, gw = jax.grad(loss, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, jnp.cos(x))
    np.testing.assert_array_equal(gw, jnp.zeros(2))

  def test_jvp_vjp_and_linearize(self):
    x, w = jnp.arange(3.0), jnp.ones(2)
    primal, tangent = jax.jvp(entangle, (x, w), (2 * x, w))
    np.testing.assert_array_equal(primal, x)
    np.testing.assert_array_equal(tangent, 2 * x)
    _, vjp = jax.vjp(entangle, x, w)
    ct_x, ct_w = vjp(jnp.full(3, 5.0))
    np.testing.assert_array_equal(ct_x, jnp.full(3, 5.0))
    np.testing.assert_array_equal(ct_w, jnp.zeros(2))
    _, linear = jax.linearize(lambda x: entangle(x, w), x)
    np.testing.assert_array_equal(linear(x), x)

  def test_jvp_entangles_the_tangent_with_the_witnesses(self):
    text = lowered_text(
      lambda x, t, w: jax.jvp(lambda x: entangle(x, w), (x,), (t,)),
      jnp.ones(3),
      jnp.ones(3),
      jnp.ones(2),
    )
    self.assertEqual(text.count(f"@{ENTANGLE_TARGET}"), 2)

  def test_integer_payload_under_grad(self):
    def loss(x, n):
      x, n = entangle((x, n), x)
      return jnp.sum(x) * n

    np.testing.assert_array_equal(
      jax.grad(loss)(jnp.ones(3), jnp.int32(2)), jnp.full(3, 2.0)
    )

  def test_checkpoint(self):
    w = jnp.ones(2)

    def fn(x):
      return jnp.sum(jax.checkpoint(lambda x: jnp.sin(entangle(x, w)))(x))

    x = jnp.arange(3.0)
    np.testing.assert_allclose(jax.jit(jax.grad(fn))(x), jnp.cos(x))

  def test_inside_scan_while_and_cond(self):
    def body(carry, _):
      carry = entangle(carry, carry * 2)
      return carry + 1, carry

    final, history = jax.jit(lambda: jax.lax.scan(body, 0.0, None, length=4))()
    self.assertEqual(float(final), 4.0)
    np.testing.assert_array_equal(history, jnp.arange(4.0))
    loop = jax.jit(
      lambda: jax.lax.while_loop(
        lambda c: c < 5, lambda c: entangle(c, c) + 1, 0
      )
    )
    self.assertEqual(int(loop()), 5)
    branch = jax.jit(
      lambda p: jax.lax.cond(p, lambda x: entangle(x, 1.0), lambda x: -x, 2.0)
    )
    self.assertEqual(float(branch(True)), 2.0)
    self.assertEqual(float(branch(False)), -2.0)


# Each applies `ent` (entangle, or the identity control) to payload `x` with
# witness `w` through a transformation, and returns an array to consume.
TRANSFORMED = {
  "plain": lambda ent, x, w: ent(x, w),
  "vmap": lambda ent, x, w: jax.vmap(ent, in_axes=(0, None))(x[None], w)[0],
  "grad": lambda ent, x, w: jax.grad(lambda x: jnp.sum(jnp.sin(ent(x, w))))(x),
  "jvp_tangent": lambda ent, x, w: jax.jvp(lambda x: ent(x, w), (x,), (x,))[1],
  "vjp_primal": lambda ent, x, w: jax.vjp(lambda x: ent(x, w), x)[0],
  "linearize": lambda ent, x, w: jax.linearize(lambda x: ent(x, w), x)[1](x),
  "checkpoint": lambda ent, x, w: jax.grad(
    lambda x: jnp.sum(jax.checkpoint(lambda x: jnp.sin(ent(x, w)))(x))
  )(x),
  "jet": lambda ent, x, w: sum(
    jet.jet(lambda x: ent(x, w), (x,), ((x, 3 * x),))[1]
  ),
  "scan": lambda ent, x, w: jax.lax.scan(
    lambda c, _: (ent(c, w) + 1, None), x, None, length=3
  )[0],
  "while_loop": lambda ent, x, w: jax.lax.while_loop(
    lambda c: c[0] < 5, lambda c: ent(c, w) + 1, x
  ),
  "cond": lambda ent, x, w: jax.lax.cond(
    x[0] > 0, lambda x: ent(x, w), lambda x: -x, x
  ),
}


def probe(transformed, ent):
  """A native read is the witness; a native write consumes the result."""

  def fn(slot, x):
    with jax.named_scope("witness"):
      w = read_slot(slot)
    y = transformed(ent, x, w)
    with jax.named_scope("consumer"):
      write_slot(slot, jnp.sum(y))
    return y, w  # Returning `w` keeps the read in the control too.

  return fn


class StructureTest(parameterized.TestCase):
  """Under every transformation: one custom call, and the order it makes.

  Values alone cannot tell entangle from the identity; the control shows
  that the identity gives neither the call nor the order.
  """

  @parameterized.named_parameters(TRANSFORMED.items())
  def test_one_call_orders_the_consumer_after_the_witness(self, transformed):
    args = (jnp.int32(0), jnp.arange(1.0, 4.0))
    compiled = jax.jit(probe(transformed, entangle)).lower(*args).compile()
    self.assertEqual(custom_calls(module_text(compiled), ENTANGLE_TARGET), 1)
    self.assertTrue(happens_before(compiled, "witness", "consumer"))
    control = jax.jit(probe(transformed, identity)).lower(*args).compile()
    self.assertEqual(custom_calls(module_text(control), ENTANGLE_TARGET), 0)
    self.assertFalse(happens_before(control, "witness", "consumer"))

  def test_jvp_keeps_one_call_each_for_primal_and_tangent(self):
    def fn(slot, x):
      with jax.named_scope("witness"):
        w = read_slot(slot)
      primal, tangent = jax.jvp(lambda x: entangle(x, w), (x,), (2 * x,))
      with jax.named_scope("consumer"):
        write_slot(slot, jnp.sum(tangent))
      return primal

    compiled = jax.jit(fn).lower(jnp.int32(0), jnp.ones(3)).compile()
    self.assertEqual(custom_calls(module_text(compiled), ENTANGLE_TARGET), 2)
    self.assertTrue(happens_before(compiled, "witness", "consumer"))

  def test_jet_passes_the_series_through(self):
    x, w = jnp.arange(3.0), jnp.ones(2)
    terms = (x, 3 * x, -x)
    primal, series = jet.jet(lambda x: entangle(x, w), (x,), (terms,))
    np.testing.assert_array_equal(primal, x)
    for got, want in zip(series, terms, strict=True):
      np.testing.assert_array_equal(got, want)


class EagerTest(parameterized.TestCase):
  def test_under_disable_jit(self):
    payload = {"a": jnp.arange(3.0), "k": jax.random.key(1), "n": 4}
    with jax.disable_jit():
      out = entangle(payload, jnp.ones(2), 5.0)
      self.assertIsInstance(out["a"], jax.Array)
    np.testing.assert_array_equal(out["a"], payload["a"])
    np.testing.assert_array_equal(
      jax.random.key_data(out["k"]), jax.random.key_data(payload["k"])
    )
    self.assertEqual(int(out["n"]), 4)

  def test_under_disable_jit_inside_vmap_and_grad(self):
    with jax.disable_jit():
      batched = jax.vmap(entangle, in_axes=(0, None))(jnp.ones((2, 3)), 1.0)
      grad = jax.grad(lambda x: jnp.sum(entangle(x, 1.0) ** 2))(jnp.ones(3))
    np.testing.assert_array_equal(batched, jnp.ones((2, 3)))
    np.testing.assert_array_equal(grad, jnp.full(3, 2.0))

  def test_leaves_committed_to_different_devices_are_named(self):
    self.assertEqual(jax.device_count(), NUM_CPU_DEVICES)
    zero, one = jax.devices()[:2]
    payload = {"x": jax.device_put(jnp.ones(3), zero)}
    witness = [jax.device_put(jnp.ones(2), one)]
    with self.assertRaisesRegex(
      ValueError,
      r"^entangle: payload\['x'\] is committed to \[.*\] but "
      r"witnesses\[1\]\[0\] to \[.*\]\..*jax\.device_put",
    ) as raised:
      entangle(payload, 1.0, witness)
    self.assertIn(str(zero), str(raised.exception))
    self.assertIn(str(one), str(raised.exception))

  def test_devices_in_another_order_name_entangle(self):
    # Same devices, other order: JAX's own check catches it; the message
    # must still name entangle rather than an internal function.
    devices = np.array(jax.devices())
    meshes = [
      jax.sharding.Mesh(order, ("x",)) for order in (devices, devices[::-1])
    ]
    x, w = (
      jax.device_put(
        jnp.arange(8.0),
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")),
      )
      for mesh in meshes
    )
    with self.assertRaisesRegex(ValueError, r"operands\[1\] of entangle "):
      entangle(x, w)

  def test_same_device_and_uncommitted_leaves_are_fine(self):
    one = jax.devices()[1]
    payload = jax.device_put(jnp.arange(3.0), one)
    out = entangle(payload, jax.device_put(2.0, one), jnp.ones(2), np.ones(1))
    self.assertEqual(out.devices(), {one})
    np.testing.assert_array_equal(out, jnp.arange(3.0))


if __name__ == "__main__":
  absltest.main()
