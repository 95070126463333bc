"""The conflict model: a race is two calls that nothing orders and that may
conflict (one resource, at least one writing). Resource calls carry their
resource and mode into the compiled module through every transformation."""

import dataclasses
from typing import Any, cast

import hypothesis
import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import entangle_jax
from entangle_jax import Resource, testing
from entangle_jax._src import access_marker
from entangle_jax._src.targets import in_code
from entangle_jax.testing import Access
from entangle_jax.testing._order import access
from entangle_jax.testing._order.objects import ObjectRef
from tests import test_util
from tests.hand_written_hlo import hlo_module, native
from tests.test_util import READ, WRITE, compiled


def write(token, value):
  return testing.write_slot(token, jnp.full(jnp.shape(token), value))


def resource_step(token, name=None):
  """The Resource example of docs/resource.md, with two reads that XLA
  cannot merge."""
  res = Resource(token, name=name)
  res.write(write, 1.0)
  x = res.read(testing.read_slot)
  y = res.read(lambda t, k: testing.read_slot(t + k), 1)
  res.write(write, 2.0)
  return x, y, res.token


def without_objects(op):
  """`op`'s accesses without the objects they name (objects_test's
  subject): the Resource names and modes."""
  return tuple(dataclasses.replace(a, object=None) for a in op.accesses)


def accesses(c, selector):
  ops = testing.OrderAnalysis(c).select_ops(selector)
  return {without_objects(op) for op in ops}


class ResourceExampleTest(absltest.TestCase):
  def test_concurrent_reads_are_no_race(self):
    c = compiled(resource_step, jnp.int32(0))
    self.assertEqual(testing.races(c), [])
    # The reads are really unordered: only their mode keeps them out.
    analysis = testing.OrderAnalysis(c)
    x, y = analysis.select_ops(READ)
    self.assertFalse(analysis.precedes(x, y) or analysis.precedes(y, x))
    self.assertEqual(without_objects(x), (Access(None, "read"),))

  def test_a_write_outside_resource_on_a_stale_token_is_caught(self):
    def stale(token):
      x, y, t = resource_step(token)
      testing.write_slot(token, 3.0)  # the token from before every call
      return x, y, t

    found = testing.races(compiled(stale, jnp.int32(0)))
    # It races with all four calls of the Resource.
    self.assertLen(found, 4)
    self.assertTrue(
      all(WRITE in (r.first.target, r.second.target) for r in found)
    )

  def test_two_unordered_writes_race(self):
    def two(token):
      res = Resource(token)
      res.write(testing.write_slot, 1.0)
      testing.write_slot(token + 1, 2.0)  # unordered, on no Resource
      return res.token

    self.assertLen(testing.races(compiled(two, jnp.int32(0))), 1)


class NamedResourceTest(parameterized.TestCase):
  def two_resources(self, first, second):
    def fn(a, b):
      ra, rb = Resource(a, name=first), Resource(b, name=second)
      ra.write(testing.write_slot, 1.0)
      rb.write(testing.write_slot, 2.0)  # nothing orders it after ra's
      return ra.token, rb.token

    return testing.races(compiled(fn, jnp.int32(0), jnp.int32(1)))

  def test_calls_of_different_named_resources_do_not_conflict(self):
    self.assertEqual(self.two_resources("a", "b"), [])
    # Controls: one name, or a Resource without one, may be the same
    # resource.
    self.assertLen(self.two_resources("a", "a"), 1)
    self.assertLen(self.two_resources("a", None), 1)

  def test_a_call_inside_two_scopes_makes_both_accesses(self):
    def fn(a, b, inside):
      ra, rb = Resource(a, name="a"), Resource(b, name="b")

      def write_b(token, value):
        # A read of "a" made while writing "b" (the value comes from "a").
        got = ra.read(testing.read_slot) if inside else value
        return testing.write_slot(token, got)

      x = 2.0 if inside else ra.read(testing.read_slot)
      rb.write(write_b, x)
      return ra.token, rb.token

    made = compiled(lambda a, b: fn(a, b, True), jnp.int32(0), jnp.int32(1))
    # Outermost scope first: counted as a write of "b" as well (it may be
    # one, for all the analysis knows).
    self.assertEqual(
      accesses(made, READ), {(Access("b", "write"), Access("a", "read"))}
    )
    # Control: the same read made outside the write only reads "a".
    made = compiled(lambda a, b: fn(a, b, False), jnp.int32(0), jnp.int32(1))
    self.assertEqual(accesses(made, READ), {(Access("a", "read"),)})

  @parameterized.parameters("solver", "a/b (x:y) %%{}", 'caf\u00e9 "q"')
  def test_the_name_survives_as_written(self, name):
    c = compiled(lambda t: resource_step(t, name), jnp.int32(0))
    self.assertEqual(
      accesses(c, WRITE), {(Access(name, "write"),)}, testing.module_text(c)
    )
    self.assertEqual(accesses(c, READ), {(Access(name, "read"),)})

  def test_bad_names(self):
    with self.assertRaisesRegex(TypeError, "name must be a str"):
      Resource(jnp.int32(0), name=cast(Any, 3))
    with self.assertRaisesRegex(ValueError, "name must not be empty"):
      Resource(jnp.int32(0), name="")

  def test_marker_round_trip(self):
    for mode in ("read", "write"):
      for name in (None, "s", "%2F/()%", "\u00e9:x"):
        component = access_marker.scope_component(mode, name)
        self.assertNotIn("/", component)
        self.assertEqual(access_marker.parse_component(component), (mode, name))
    self.assertIsNone(access_marker.parse_component("entangle_jax:peek"))


class TransformsTest(parameterized.TestCase):
  """Resource's record of each call survives jit's neighbours."""

  def check(self, c, name="r", races=True):
    self.assertEqual(accesses(c, WRITE), {(Access(name, "write"),)})
    self.assertEqual(accesses(c, READ), {(Access(name, "read"),)})
    if races:
      self.assertEqual(testing.races(c), [])

  def test_scan_and_while_loop(self):
    def scanned(token):
      def body(t, _):
        return resource_step(t, "r")[2], None

      return jax.lax.scan(body, token, None, length=3)[0]

    self.check(compiled(scanned, jnp.int32(0)))

    def looped(token):
      body = lambda c: (resource_step(c[0], "r")[2], c[1] + 1)  # noqa: E731
      return jax.lax.while_loop(lambda c: c[1] < 3, body, (token, 0))

    self.check(compiled(looped, jnp.int32(0)))

  def test_grad(self):
    def loss(v, token):
      x, y, t = resource_step(token, "r")
      return x * v + y, t

    fn = jax.grad(loss, has_aux=True)
    self.check(compiled(fn, jnp.float32(1), jnp.int32(0)))

  def test_vmap(self):
    fn = jax.vmap(lambda t: resource_step(t, "r"))
    self.check(compiled(fn, jnp.arange(4, dtype=jnp.int32)))

  def test_shard_map(self):
    mesh = jax.make_mesh((test_util.NUM_CPU_DEVICES,), ("x",))
    fn = jax.shard_map(
      lambda t: resource_step(t, "r"),
      mesh=mesh,
      in_specs=P("x"),
      out_specs=(P("x"), P("x"), P("x")),
    )
    tokens = jax.device_put(
      jnp.arange(test_util.NUM_CPU_DEVICES, dtype=jnp.int32),
      NamedSharding(mesh, P("x")),
    )
    c = jax.jit(fn).lower(tokens).compile()
    self.check(c, races=False)  # The markers survived.
    # The store is one table for every CPU device, and nothing says the
    # devices' shards of `tokens` are different slots: every write may
    # meet a write or read of another device (objects_test's device rule).
    across = testing.races(c)
    self.assertNotEmpty(across)
    self.assertTrue(all(race.across_devices for race in across))
    # Asserted, the shards are distinct slots. What is left is real: the
    # read of slot `t + 1` on device d meets device d + 1's writes of it.
    distinct = dataclasses.replace(
      testing.declarations_in_effect(), distinct_elements=True
    )
    left = testing.OrderAnalysis(c, declarations=distinct).races()
    text = testing.module_text(c)
    if "sharding={devices=" not in text:
      # Newer XLA leaves how arguments are split out of the optimized
      # text: alone, it cannot tell the shards apart, and the pairs stay
      # (docs/proving_order.md, Several devices); the Compiled tells.
      alone = testing.OrderAnalysis(text, declarations=distinct).races()
      self.assertEqual(alone, across)
    self.assertLen(left, 2)
    for race in left:
      # One of the two is that read: its slot is computed, not the shard.
      computed = [
        op
        for op in (race.first, race.second)
        for a in op.accesses
        if a.object is not None and not a.object.tiled
      ]
      self.assertEqual([op.target for op in computed], [READ])

  def test_export_serialize_deserialize_compile(self):
    checks = [
      *entangle_jax.export_safety_checks(),
      jax.export.DisabledSafetyCheck.custom_call(READ),
      jax.export.DisabledSafetyCheck.custom_call(WRITE),
    ]
    exported = jax.export.export(
      jax.jit(lambda t: resource_step(t, "r")), disabled_checks=checks
    )(jnp.int32(0))
    restored = jax.export.deserialize(exported.serialize())
    self.check(jax.jit(restored.call).lower(jnp.int32(0)).compile())
    # The Exported itself is no compiled module; the error says what is.
    with self.assertRaisesRegex(
      TypeError, r"^races: .*not Exported .*jax.jit\(exported.call\).lower"
    ):
      testing.races(cast(Any, restored))


_RESOURCES = st.sampled_from([None, "a", "b"])
_OBJECTS = st.one_of(
  st.none(),
  st.builds(
    ObjectRef,
    st.sampled_from(
      [("constant", "0"), ("constant", "1"), ("value", "main", "h", ())]
    ),
    st.sampled_from([None, 0, 1]),
    st.booleans(),
    st.booleans(),
  ),
)
_ACCESS = st.builds(
  Access, _RESOURCES, st.sampled_from(["read", "write"]), _OBJECTS
)


class ConflictRuleTest(absltest.TestCase):
  @hypothesis.settings(max_examples=300, deadline=None)
  @hypothesis.given(
    st.lists(st.lists(_ACCESS, max_size=3).map(tuple), min_size=1, max_size=6)
  )
  def test_the_masks_agree_with_the_rule(self, calls):
    # One bit per call; the masks must name exactly the calls that
    # `access.conflict` says each call conflicts with.
    masks = access.ConflictMasks(calls, [[k] for k in range(len(calls))])
    for k, mine in enumerate(calls):
      expected = {
        j for j, theirs in enumerate(calls) if access.conflict(mine, theirs)
      }
      got = {j for j in range(len(calls)) if masks.of(k) >> j & 1}
      self.assertEqual(got, expected, (k, calls))

  def test_the_rule(self):
    read_a, write_a = Access("a", "read"), Access("a", "write")
    write_b, read_any = Access("b", "write"), Access(None, "read")
    self.assertTrue(access.conflict((read_a,), (write_a,)))
    self.assertFalse(access.conflict((read_a,), (read_a,)))
    self.assertFalse(access.conflict((write_a,), (write_b,)))
    self.assertTrue(access.conflict((read_any,), (write_b,)))
    self.assertFalse(access.conflict((read_any,), (read_a,)))
    self.assertFalse(access.conflict((), (write_a,)))


class DeclaredTargetsTest(absltest.TestCase):
  def test_a_target_declared_read(self):
    def two_reads(slot):
      return testing.read_slot(slot), testing.read_slot(slot + 1)

    c = compiled(two_reads, jnp.int32(0))
    self.assertEqual(testing.races(c), [])
    try:
      # Control: undeclared, the same target may write, and the reads race.
      testing.declare_target_mode(READ, "write")
      self.assertLen(testing.races(c), 1)
      self.assertEqual(accesses(c, READ), {(Access(None, "write"),)})
    finally:
      in_code.forget(READ)  # What was built in holds again.
    self.assertEqual(testing.races(c), [])

  def test_an_analysis_keeps_the_declarations_it_was_made_with(self):
    text = hlo_module(
      f"%p = s32[] parameter(0)\n{native('peek', 'p')}\n{native('look', 'p')}"
    )
    peek = "peek"  # The targets are the calls' names.
    undeclared = testing.OrderAnalysis(text)
    self.assertLen(undeclared.races(["peek", "look"]), 1)
    declared = testing.OrderAnalysis(text, read_targets=[peek, "look"])
    self.assertEqual(declared.races(["peek", "look"]), [])
    try:
      testing.declare_target_mode(peek, "read")
      testing.declare_target_mode("look", "read")
      # Made before the declarations, asked after: the same answer.
      self.assertLen(undeclared.races(["peek", "look"]), 1)
      self.assertEqual(testing.races(text, ["peek", "look"]), [])
      # Asked in turn on one text, each analysis keeps its own answer.
      again = testing.OrderAnalysis(text, read_targets=())
      self.assertLen(again.races(["peek", "look"]), 1)
      self.assertEqual(declared.races(["peek", "look"]), [])
    finally:
      in_code.forget(peek)
      in_code.forget("look")
    self.assertLen(testing.races(text, ["peek", "look"]), 1)

  def test_bad_read_targets(self):
    text = hlo_module(f"%p = s32[] parameter(0)\n{native('peek', 'p')}")
    with self.assertRaisesRegex(TypeError, "not a str .*'peek'"):
      testing.OrderAnalysis(text, read_targets="peek")
    with self.assertRaisesRegex(TypeError, "got int: 3"):
      testing.OrderAnalysis(text, read_targets=cast(Any, ["peek", 3]))

  def test_bad_declarations(self):
    with self.assertRaisesRegex(ValueError, "'peek'"):
      testing.declare_target_mode("t", cast(Any, "peek"))
    with self.assertRaisesRegex(TypeError, "str"):
      testing.declare_target_mode(cast(Any, 3), "read")
    with self.assertRaisesRegex(ValueError, "empty"):
      testing.declare_target_mode("", "read")


if __name__ == "__main__":
  absltest.main()
