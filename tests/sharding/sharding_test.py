"""Sharded entangle: no collectives added, the payload's sharding kept.

Under jit on attached devices, inside fully and partially manual shard_map,
and in modules exported for an AbstractMesh and compiled after
deserialization.
"""

import re
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax import export
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import entangle_jax
from entangle_jax import entangle
from entangle_jax._src import native
from entangle_jax.testing import module_text
from tests import test_util

_COLLECTIVE = re.compile(
  r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
  r"(-start)?\("
)

# The no-op handler under a second name that has no partitioner and no
# sharding rule: what XLA does with a plain aliasing custom call.
_UNPARTITIONED = "entangle_jax_test_unpartitioned"
jax.ffi.register_ffi_target(
  _UNPARTITIONED, native.load().registrations()["entangle"]
)


def collectives(compiled) -> list[str]:
  """The collectives in a compiled module, one entry per op, in text order.

  Counts all-gather, all-reduce, all-to-all, collective-permute and
  reduce-scatter, synchronous or `-start` (async) forms, each once.
  """
  text = module_text(compiled)
  return [m.group(1) for m in _COLLECTIVE.finditer(text)]


def export_for_abstract_mesh(num_devices: int) -> export.Exported:
  """Exports `entangle(p, w) * 2` for a 1-d AbstractMesh of `num_devices`.

  The payload p is (2 * num_devices,) sharded P('x'), the witness w is
  (8, 2 * num_devices) sharded P(None, 'x'); no device need be attached.
  """
  abstract = AbstractMesh((num_devices,), ("x",))
  sharded = NamedSharding(abstract, P("x"))
  witness_sharding = NamedSharding(abstract, P(None, "x"))
  fn = jax.jit(
    lambda p, w: entangle(p, w) * 2,
    in_shardings=(sharded, witness_sharding),
    out_shardings=sharded,
  )
  size = 2 * num_devices
  return export.export(
    fn,
    platforms=["cpu"],
    disabled_checks=entangle_jax.export_safety_checks(),
  )(
    jax.ShapeDtypeStruct((size,), jnp.float32, sharding=sharded),
    jax.ShapeDtypeStruct((8, size), jnp.float32, sharding=witness_sharding),
  )


def put(mesh, value, spec):
  return jax.device_put(value, NamedSharding(mesh, spec))


def mesh_1d(axis_type=AxisType.Explicit):
  return jax.make_mesh((8,), ("x",), axis_types=(axis_type,))


def mesh_2d(axis_type=AxisType.Explicit):
  return jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)


def unpartitioned_entangle(payload, witness):
  return jax.ffi.ffi_call(
    _UNPARTITIONED,
    jax.ShapeDtypeStruct(payload.shape, payload.dtype),
    input_output_aliases={0: 0},
  )(payload, witness)


def arange(shape, dtype=jnp.float32):
  return jnp.arange(np.prod(shape), dtype=dtype).reshape(shape)


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
    payload = put(mesh, arange(p_shape), p_spec)
    witness = put(mesh, jnp.ones(w_shape), w_spec)
    fn = jax.jit(lambda p, w: entangle(p, w))
    self.assertEqual(collectives(fn.lower(payload, witness).compile()), [])
    out = fn(payload, witness)
    self.assertTrue(
      out.sharding.is_equivalent_to(payload.sharding, len(p_shape))
    )
    np.testing.assert_array_equal(out, payload)

  def test_plain_custom_call_would_add_collectives(self):
    # The control: the same no-op handler and aliasing, without entangle's
    # partitioner and sharding rule, is replicated by the partitioner.
    mesh = mesh_1d()
    payload = put(mesh, jnp.arange(16.0), P("x"))
    witness = put(mesh, jnp.ones((8, 16)), P(None, "x"))
    fn = jax.jit(unpartitioned_entangle)
    self.assertNotEqual(collectives(fn.lower(payload, witness).compile()), [])
    np.testing.assert_array_equal(fn(payload, witness), payload)

  def test_a_token_witness_keeps_the_sharding(self):
    # A call with a token operand gets no Shardy rule; the partitioner
    # keeps the payload's sharding and takes the token as it is.
    mesh = mesh_1d()
    payload = put(mesh, jnp.arange(16.0), P("x"))
    token_fn = jax.jit(
      lambda p: entangle(p, jax.lax.after_all(jax.lax.create_token()))
    )
    compiled = token_fn.lower(payload).compile()
    self.assertEqual(collectives(compiled), [])
    (line,) = [
      line
      for line in module_text(compiled).splitlines()
      if f'"{native.ENTANGLE_TARGET}"' in line
    ]
    self.assertIn("f32[2]", line)  # The local shard, with the token.
    self.assertIn("token[]", line)
    out = token_fn(payload)
    self.assertTrue(out.sharding.is_equivalent_to(payload.sharding, 1))
    np.testing.assert_array_equal(out, payload)

  def test_several_leaves_one_call(self):
    mesh = mesh_2d()
    a = put(mesh, jnp.ones((8, 4)), P("x", "y"))
    b = put(mesh, jnp.ones(6), P("y"))
    w = put(mesh, jnp.ones(4), P("x"))
    fn = jax.jit(lambda a, b, w: entangle((a, b), w, w * 2))
    compiled = fn.lower(a, b, w).compile()
    self.assertEqual(collectives(compiled), [])
    self.assertEqual(
      test_util.custom_calls(module_text(compiled), native.ENTANGLE_TARGET),
      1,
    )
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

  @parameterized.named_parameters(
    ("fully_manual", {"x", "y"}, P("x", "y"), P("y", "x")),
    ("partially_manual", {"x"}, P("x"), P(None, "x")),
  )
  def test_shard_map_keeps_two_d_sharding(self, axes, p_spec, w_spec):
    # Partially manual: 'y' stays automatic inside the body, so the payload
    # keeps P('x', 'y') only if entangle keeps its automatic sharding too.
    if (
      axes != {"x", "y"} and not jax.config.values["jax_use_shardy_partitioner"]
    ):
      self.skipTest(
        "GSPMD gathers a partially manual shard_map's automatic axes even "
        "for the identity; Shardy (jax_use_shardy_partitioner) keeps them."
      )
    mesh = mesh_2d(AxisType.Auto)
    payload = put(mesh, arange((8, 6)), P("x", "y"))
    witness = put(mesh, jnp.ones((8, 8)), P("y", "x"))

    def sharded(body):
      return jax.jit(
        jax.shard_map(
          body,
          mesh=mesh,
          in_specs=(p_spec, w_spec),
          out_specs=p_spec,
          axis_names=axes,
        )
      )

    fn = sharded(lambda p, w: entangle(p, w))
    self.assertEqual(collectives(fn.lower(payload, witness).compile()), [])
    out = fn(payload, witness)
    self.assertEqual(out.sharding.spec, P("x", "y"))
    np.testing.assert_array_equal(out, payload)
    # The control: the plain custom call gathers the automatic axis.
    if axes == {"x"}:
      plain = sharded(unpartitioned_entangle)
      self.assertNotEqual(
        collectives(plain.lower(payload, witness).compile()), []
      )


class ShardedExportTest(absltest.TestCase):
  def export(self, fn, *args, **kwargs):
    return export.export(
      fn, disabled_checks=entangle_jax.export_safety_checks(), **kwargs
    )(*args)

  def test_abstract_mesh_export_runs_on_eight_devices(self):
    # Exported for a topology that is not attached: no device is needed to
    # lower entangle.
    exported = export_for_abstract_mesh(8)
    self.assertEqual(exported.nr_devices, 8)
    restored = export.deserialize(exported.serialize())
    mesh = mesh_1d(AxisType.Auto)
    payload = put(mesh, jnp.arange(16.0), P("x"))
    witness = put(mesh, jnp.ones((8, 16)), P(None, "x"))
    call = jax.jit(restored.call)
    self.assertEqual(collectives(call.lower(payload, witness).compile()), [])
    out = call(payload, witness)
    np.testing.assert_array_equal(out, np.arange(16.0) * 2)
    self.assertTrue(out.sharding.is_equivalent_to(payload.sharding, 1))

  def test_attached_mesh_export_round_trip(self):
    fn, sharded, replicated = test_util.sharded_entangle(mesh_1d())
    x = jax.device_put(jnp.arange(16.0), sharded)
    w = jax.device_put(jnp.ones(3), replicated)
    exported = self.export(fn, x, w)
    self.assertEqual(exported.nr_devices, 8)
    restored = export.deserialize(exported.serialize())
    self.assertEqual(
      collectives(jax.jit(restored.call).lower(x, w).compile()), []
    )
    out = restored.call(x, w)
    np.testing.assert_array_equal(out, x)
    self.assertTrue(out.sharding.is_equivalent_to(sharded, 1))

  def test_shape_polymorphic_export(self):
    (batch,) = export.symbolic_shape("b")
    exported = self.export(
      jax.jit(lambda p, w: entangle(p, w)),
      jax.ShapeDtypeStruct((batch, 3), jnp.float32),
      jax.ShapeDtypeStruct((batch,), jnp.int32),
    )
    restored = export.deserialize(exported.serialize())
    payload = arange((5, 3))
    np.testing.assert_array_equal(
      restored.call(payload, jnp.zeros(5, jnp.int32)), payload
    )


# Compiles one sharded entangle program, and a custom_partitioning program
# as the control, with the persistent cache in argv[1]; prints what each
# compilation found in the cache.
_CACHE_PROCESS = """
import sys
import jax

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P
from entangle_jax import entangle

events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
mesh = jax.make_mesh((8,), ("x",))
x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))
w = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(None, "x")))

@custom_partitioning
def double(x):
  return x * 2

double.def_partition(
  partition=lambda mesh, args, result: (
    mesh, lambda x: x * 2, args[0].sharding, (args[0].sharding,)),
  infer_sharding_from_operands=lambda mesh, args, result: args[0].sharding,
  sharding_rule="i -> i",
)

for name, fn in (
  ("entangle", lambda x, w: entangle(x, w) + 1),
  ("custom_partitioning", lambda x, w: double(x) + 1),
):
  del events[:]
  jax.jit(fn).lower(x, w).compile()
  print(name, "hits", events.count("/jax/compilation_cache/cache_hits"))
"""


class PersistentCacheTest(absltest.TestCase):
  def run_process(self, cache_dir: str) -> str:
    # Fresh interpreters: two children forked from one preloaded Python
    # share custom_partitioning's per-process key (the control below).
    result = test_util.run_python(
      _CACHE_PROCESS, cache_dir, timeout=240, fresh=True
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout

  def test_second_process_hits_the_cache(self):
    with tempfile.TemporaryDirectory() as cache_dir:
      first = self.run_process(cache_dir)
      second = self.run_process(cache_dir)
    self.assertIn("entangle hits 0", first)
    self.assertIn("entangle hits 1", second)
    # The control: custom_partitioning puts a per-process key in the module,
    # so the same program misses in the second process.
    self.assertIn("custom_partitioning hits 0", second)


if __name__ == "__main__":
  absltest.main()
