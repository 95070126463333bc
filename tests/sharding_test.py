"""Sharded entangle: no collectives added, the payload's sharding kept."""

import re
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from entangle_jax import _partitioning, entangle
from entangle_jax.testing import module_text
from tests import test_util  # noqa: F401  (sets up 8 CPU devices)

_COLLECTIVE = re.compile(
  r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
  r"(-start)?\("
)


def collectives(compiled) -> list[str]:
  text = module_text(compiled)
  return [m.group(1) for m in _COLLECTIVE.finditer(text)]


def put(mesh, value, spec):
  return jax.device_put(value, NamedSharding(mesh, spec))


def mesh_1d():
  return jax.make_mesh((8,), ("x",))


def mesh_2d():
  return jax.make_mesh((4, 2), ("x", "y"))


# (name, mesh, payload shape, payload spec, witness shape, witness spec)
CASES = [
  ("witness_sharded_alike", mesh_1d, (16,), P("x"), (16,), P("x")),
  (
    "witness_sharded_differently",
    mesh_1d,
    (16,),
    P("x"),
    (8, 16),
    P(None, "x"),
  ),
  ("witness_replicated", mesh_1d, (16, 3), P("x"), (5,), P()),
  ("two_d_mesh", mesh_2d, (8, 6), P("x", "y"), (8, 8), P("y", "x")),
  ("partially_sharded", mesh_2d, (8, 6), P("x", None), (2,), P("y")),
  ("replicated_payload", mesh_1d, (4,), P(), (16,), P("x")),
]


class ShardingTest(parameterized.TestCase):
  @parameterized.named_parameters(CASES)
  def test_no_collectives_and_sharding_kept(
    self, make_mesh, p_shape, p_spec, w_shape, w_spec
  ):
    mesh = make_mesh()
    payload = put(
      mesh,
      jnp.arange(np.prod(p_shape), dtype=jnp.float32).reshape(p_shape),
      p_spec,
    )
    witness = put(mesh, jnp.ones(w_shape), w_spec)
    fn = jax.jit(lambda p, w: entangle(p, w))
    self.assertEqual(collectives(fn.lower(payload, witness).compile()), [])
    out = fn(payload, witness)
    self.assertTrue(
      out.sharding.is_equivalent_to(payload.sharding, len(p_shape))
    )
    np.testing.assert_array_equal(out, payload)

  def test_plain_custom_call_would_add_collectives(self):
    # The control: the same program through the unpartitioned custom call.
    mesh = mesh_1d()
    payload = put(mesh, jnp.arange(16.0), P("x"))
    witness = put(mesh, jnp.ones((8, 16)), P(None, "x"))
    with mock.patch.object(
      _partitioning, "needs_partitioning", return_value=False
    ):
      fn = jax.jit(lambda p, w: entangle(p, w))
      self.assertNotEqual(collectives(fn.lower(payload, witness).compile()), [])

  def test_several_leaves_one_call(self):
    mesh = mesh_2d()
    a = put(mesh, jnp.ones((8, 4)), P("x", "y"))
    b = put(mesh, jnp.ones(6), P("y"))
    w = put(mesh, jnp.ones(4), P("x"))
    fn = jax.jit(lambda a, b, w: entangle((a, b), w, w * 2))
    compiled = fn.lower(a, b, w).compile()
    self.assertEqual(collectives(compiled), [])
    out_a, out_b = fn(a, b, w)
    self.assertTrue(out_a.sharding.is_equivalent_to(a.sharding, 2))
    self.assertTrue(out_b.sharding.is_equivalent_to(b.sharding, 1))

  def test_vmap_under_sharding(self):
    mesh = mesh_1d()
    payload = put(mesh, jnp.ones((8, 3)), P("x"))
    fn = jax.jit(jax.vmap(lambda p, w: entangle(p, w), in_axes=(0, None)))
    self.assertEqual(collectives(fn.lower(payload, jnp.ones(2)).compile()), [])

  def test_inside_shard_map(self):
    mesh = mesh_1d()
    payload = put(mesh, jnp.arange(16.0), P("x"))
    witness = put(mesh, jnp.ones(16), P())
    fn = jax.jit(
      jax.shard_map(
        lambda p, w: entangle(p, w),
        mesh=mesh,
        in_specs=(P("x"), P()),
        out_specs=P("x"),
      )
    )
    self.assertEqual(collectives(fn.lower(payload, witness).compile()), [])
    np.testing.assert_array_equal(fn(payload, witness), payload)


if __name__ == "__main__":
  absltest.main()
