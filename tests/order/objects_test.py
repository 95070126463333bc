"""Object identity: which native object each call touches, proved from the
module (sameness) or asserted (distinctness), never taken from names
alone."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from entangle_jax import Resource, entangle, testing
from entangle_jax._src.native import ENTANGLE_TARGET as ENTANGLE
from entangle_jax.testing import Declarations, TargetDeclaration
from tests import test_util
from tests.hand_written_hlo import hlo_module
from tests.temp_project import project
from tests.test_util import READ, WRITE, compiled

HANDLES = np.arange(12, dtype=np.int32)


def two_wrappers(first: str, second: str, *, same_handle: bool = True):
  """Set and get through one Resource, set through another; both built on
  ``handles[0]`` (or the second on ``handles[1]``)."""

  def fn(handles):
    a = Resource(handles[0], name=first)
    b = Resource(handles[0 if same_handle else 1], name=second)
    a.write(testing.write_slot, 1.0)
    x = a.read(testing.read_slot)
    b.write(testing.write_slot, 2.0)
    return x, a.token, b.token

  return compiled(fn, HANDLES)


def per_handle_hazards(count: int, *, ordered=True, name=None, skip=()):
  """`count` set / get / set sequences, one per element of the handle
  array; through one unnamed (or `name`d) Resource each when `ordered`,
  except the handles in `skip`, whose second set takes the first set's
  token and so is not ordered after the get."""

  def fn(handles):
    out = []
    for k in range(count):
      if ordered and k not in skip:
        res = Resource(handles[k], name=name)
        res.write(testing.write_slot, 1.0)
        out.append(res.read(testing.read_slot))
        res.write(testing.write_slot, 2.0)
        out.append(res.token)
      else:
        t = testing.write_slot(handles[k], 1.0)
        out.append(testing.read_slot(t))
        out.append(testing.write_slot(t, 2.0))
    return out

  return compiled(fn, HANDLES)


def same(a, b) -> bool:
  """Whether ops `a` and `b` provably touch one object."""
  (x,), (y,) = a.accesses, b.accesses
  assert x.object is not None and y.object is not None
  return x.object.same(y.object)


def declared(distinct: bool) -> Declarations:
  """The store's targets, declared as a third-party binding would: write
  and read, object operand 0, the write's result the same object."""
  return Declarations(
    targets=(
      TargetDeclaration(WRITE, "write", 0, (0,), distinct, source="test"),
      TargetDeclaration(READ, "read", 0, (), distinct, source="test"),
    )
  )


class TwoNamesOnOneHandleTest(absltest.TestCase):
  def test_two_resources_on_one_handle_race_whatever_their_names(self):
    c = two_wrappers("wrapper_a", "wrapper_b")
    found = testing.races(c)
    # The second wrapper's set against the first's set and get.
    self.assertLen(found, 2)
    for race in found:
      names = {
        a.resource for op in (race.first, race.second) for a in op.accesses
      }
      self.assertEqual(names, {"wrapper_a", "wrapper_b"})
    text = testing.format_races(found)
    self.assertIn(
      "one object under two names, 'wrapper_a' and 'wrapper_b'", text
    )

  def test_control_two_handles_under_two_names_do_not_race(self):
    c = two_wrappers("wrapper_a", "wrapper_b", same_handle=False)
    self.assertEqual(testing.races(c), [])

  def test_control_one_name_on_one_handle_races_too(self):
    self.assertLen(testing.races(two_wrappers("w", "w")), 2)

  def test_a_handle_passed_twice_is_the_users_assertion(self):
    # f(h, h): two parameters, one value at run time. The module cannot
    # know they are equal, so the names decide (docs/proving_order.md).
    def fn(h1, h2):
      a, b = Resource(h1, name="a"), Resource(h2, name="b")
      a.write(testing.write_slot, 1.0)
      x = a.read(testing.read_slot)
      b.write(testing.write_slot, 2.0)
      return x, a.token, b.token

    c = compiled(fn, jnp.int32(0), jnp.int32(0))
    self.assertEqual(testing.races(c), [])

    # Control: one parameter for both is provably one handle.
    def same(h):
      return fn(h, h)

    self.assertLen(testing.races(compiled(same, jnp.int32(0))), 2)


class DistinctElementsTest(absltest.TestCase):
  def test_unnamed_per_handle_resources_give_one_group_with_the_fix(self):
    c = per_handle_hazards(4)
    found = testing.races(c)
    self.assertNotEmpty(found)
    text = testing.format_races(found)
    self.assertIn(
      f"{len(found)} pairs of calls may conflict and run in either order:",
      text,
    )
    self.assertIn("different elements of one array of handles", text)
    self.assertIn("distinct_elements = true", text)
    self.assertNotIn("reasons", text)  # One group.

  def test_pairs_on_the_same_lines_are_one_entry_with_a_count(self):
    found = testing.races(per_handle_hazards(4))
    text = testing.format_races(found, shown_per_group=None)
    counts = [
      int(n) for n in re.findall(r"\((\d+) pairs on these lines\)", text)
    ]
    entries = text.count("\n    and ")
    self.assertNotEmpty(counts)  # A loop over handles: lines repeat.
    # Every pair is in one entry: those with a count, and single ones.
    self.assertEqual(sum(counts) + entries - len(counts), len(found))
    short = testing.format_races(found, shown_per_group=1)
    self.assertEqual(short.count("\n    and "), 1)
    self.assertIn("more pairs like these", short)

  def test_asserting_distinct_elements_leaves_none(self):
    c = per_handle_hazards(4)
    project = Declarations(distinct_elements=True)
    self.assertEqual(testing.OrderAnalysis(c, declarations=project).races(), [])
    # Or per target.
    analysis = testing.OrderAnalysis(c, declarations=declared(True))
    self.assertEqual(analysis.races(), [])

  def test_control_a_real_hazard_stays_once_distinctness_is_asserted(self):
    c = per_handle_hazards(4, skip=(2,))
    found = testing.OrderAnalysis(c, declarations=declared(True)).races()
    # Handle 2's get and second set, outside any Resource: the one real
    # hazard (the declared targets name their handles, all distinct).
    self.assertLen(found, 1)
    self.assertEqual(
      {found[0].first.target, found[0].second.target}, {READ, WRITE}
    )

  def test_one_shared_name_still_needs_the_assertion(self):
    c = per_handle_hazards(3, name="counters")
    self.assertNotEmpty(testing.races(c))
    project = Declarations(distinct_elements=True)
    self.assertEqual(testing.OrderAnalysis(c, declarations=project).races(), [])


class DeclaredTargetsTest(absltest.TestCase):
  def test_twelve_unordered_hazards_report_their_twelve_real_pairs(self):
    c = per_handle_hazards(12, ordered=False)
    analysis = testing.OrderAnalysis(c, declarations=declared(True))
    found = analysis.races()
    self.assertLen(found, 12)
    for race in found:
      self.assertEqual({race.first.target, race.second.target}, {READ, WRITE})
      self.assertTrue(same(race.first, race.second))
    # Control: without distinct elements, every handle may be any other.
    undistinct = testing.OrderAnalysis(c, declarations=declared(False))
    self.assertGreater(len(undistinct.races()), 12)
    # And without declarations at all, every call may write anything.
    bare = testing.OrderAnalysis(c, declarations=Declarations())
    self.assertGreater(len(bare.races()), len(undistinct.races()))

  def test_the_same_declarations_from_pyproject(self):
    table = f"""
    [tool.entangle-jax.targets.{WRITE}]
    mode = "write"
    object = 0
    returns_object = [0]
    distinct_elements = true

    [tool.entangle-jax.targets.{READ}]
    mode = "read"
    object = 0
    distinct_elements = true
    """
    c = per_handle_hazards(12, ordered=False)
    with project(table):
      found = testing.races(c)
      text = testing.format_races(found)
    self.assertLen(found, 12)
    self.assertIn("pyproject.toml", text)  # Which declarations applied.
    self.assertGreater(len(testing.races(c)), 12)  # The control: the store's.

  def test_different_constants_are_different_objects(self):
    def fn():
      t = testing.write_slot(0, 1.0)
      x = testing.read_slot(t)
      testing.write_slot(1, 2.0)  # Another slot: no conflict with x.
      return x

    self.assertEqual(testing.races(compiled(fn)), [])

    def control():
      t = testing.write_slot(0, 1.0)
      x = testing.read_slot(t)
      testing.write_slot(0, 2.0)  # The same slot.
      return x

    # The read and the first write, each against the second write.
    self.assertLen(testing.races(compiled(control)), 2)


class FollowedThroughTest(absltest.TestCase):
  def test_a_scan_carry_is_the_same_object_inside_and_out(self):
    def fn(h):
      outside = Resource(h, name="outer")
      outside.write(testing.write_slot, 1.0)

      def body(t, _):
        inner = Resource(t, name="inner")
        inner.write(testing.write_slot, 2.0)
        return inner.token, None

      t, _ = jax.lax.scan(body, outside.token, None, length=3)
      return t

    c = compiled(fn, jnp.int32(0))
    analysis = testing.OrderAnalysis(c)
    first, *rest = analysis.select_ops(WRITE)
    self.assertNotEmpty(rest)
    # Two names, one handle: the carry passes it on through each write.
    self.assertTrue(same(first, rest[0]))
    self.assertTrue(analysis.conflict(first, rest[0]))
    self.assertEqual(testing.races(c), [])  # Ordered by the carry.

    # Control: a body on a handle of its own is another object.
    def fresh(h):
      outside = Resource(h, name="outer")
      outside.write(testing.write_slot, 1.0)

      def body(t, _):
        inner = Resource(jnp.int32(5), name="inner")
        inner.write(testing.write_slot, 2.0)
        return entangle(t, inner.token), None

      t, _ = jax.lax.scan(body, outside.token, None, length=3)
      return t

    control = testing.OrderAnalysis(compiled(fresh, jnp.int32(0)))
    first, inner = control.select_ops(WRITE)[:2]
    self.assertFalse(control.conflict(first, inner))

  def test_elements_of_a_broadcast_handle_are_that_handle(self):
    # `vmap` of a call on one handle hands the call [h, h, h]: declared
    # distinct elements must not make its elements different objects.
    def fn(slots):
      written = testing.write_slot(slots, jnp.ones(3))  # one write each
      x = testing.read_slot(written[0])
      testing.write_slot(written[1], 2.0)  # not ordered after the read
      return x

    def broadcast(h):
      return fn(jnp.broadcast_to(h, (3,)))

    c = compiled(broadcast, jnp.int32(5))
    pairs = testing.OrderAnalysis(c, declarations=declared(True)).races()
    self.assertLen(pairs, 1)
    (race,) = pairs
    self.assertTrue(same(race.first, race.second))
    # Control: three handles of an argument, declared distinct, are three
    # objects, so elements 0 and 1 do not race.
    c = compiled(fn, HANDLES[:3])
    self.assertEqual(
      testing.OrderAnalysis(c, declarations=declared(True)).races(), []
    )

  def test_a_dynamic_slice_may_be_any_element(self):
    def fn(handles, k):
      res = Resource(handles[0], name="a")
      res.write(testing.write_slot, 1.0)
      x = res.read(testing.read_slot)
      other = Resource(jax.lax.dynamic_index_in_dim(handles, k, 0, False))
      other.write(testing.write_slot, 2.0)
      return x, res.token, other.token

    c = compiled(fn, HANDLES, jnp.int32(3))
    project = Declarations(distinct_elements=True)
    # Element k may be element 0: its unnamed write races with both.
    self.assertLen(testing.OrderAnalysis(c, declarations=project).races(), 2)

    def control(handles):
      return fn(handles, 3)  # A constant index: element 3, distinct.

    c = compiled(control, HANDLES)
    self.assertEqual(testing.OrderAnalysis(c, declarations=project).races(), [])


def on_every_device(slot_of):
  """A shard_map over the 8 CPU devices: each writes, then reads, the
  slot `slot_of(shard)` names."""
  mesh = jax.make_mesh((test_util.NUM_CPU_DEVICES,), ("d",))

  def body(shard):
    t = testing.write_slot(slot_of(shard), shard.astype(jnp.float32))
    return testing.read_slot(t)

  fn = jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
  ids = jax.device_put(
    jnp.arange(test_util.NUM_CPU_DEVICES, dtype=jnp.int32),
    NamedSharding(mesh, P("d")),
  )
  return jax.jit(fn).lower(ids).compile()


class DevicesTest(absltest.TestCase):
  def test_one_host_slot_written_from_every_device_is_reported(self):
    c = on_every_device(lambda shard: jnp.zeros_like(shard))
    self.assertEqual(testing.OrderAnalysis(c).module.devices, 8)
    found = testing.races(c)
    self.assertTrue(found and all(r.across_devices for r in found))
    # The write with itself (on two devices), and with the read.
    self.assertIn((found[0].first.name, found[0].first.name), found)
    self.assertIn("on another device", testing.format_races(found))

  def test_control_a_per_device_target_does_not_race_across(self):
    c = on_every_device(lambda shard: jnp.zeros_like(shard))
    per_device = Declarations(
      targets=(
        TargetDeclaration(
          WRITE, "write", 0, (0,), devices="per-device", source="test"
        ),
        TargetDeclaration(
          READ, "read", 0, (), devices="per-device", source="test"
        ),
      )
    )
    self.assertEqual(
      testing.OrderAnalysis(c, declarations=per_device).races(), []
    )

  def test_each_device_on_its_own_shard_needs_distinct_elements(self):
    c = on_every_device(lambda shard: shard)
    found = testing.races(c)
    self.assertNotEmpty(found)  # Shards may repeat a slot.
    distinct = dataclasses.replace(
      testing.declarations_in_effect(), distinct_elements=True
    )
    asserted = testing.OrderAnalysis(c, declarations=distinct).races()
    self.assertEqual(asserted, [])
    if not records_sharding(c):
      # Newer XLA leaves the shardings out of the optimized text, which
      # alone cannot tell the shards apart (documented); the Compiled can.
      alone = testing.OrderAnalysis(
        testing.module_text(c), declarations=distinct
      ).races()
      self.assertEqual(alone, found)


class DevicesDefaultTest(absltest.TestCase):
  """What nothing declares may touch process-wide state: shared across
  devices until declared per device (the safe default, as "may write
  anything" is for the mode)."""

  def test_an_undeclared_target_is_shared_across_devices(self):
    c = on_every_device(lambda shard: jnp.zeros_like(shard))
    nothing = Declarations()  # Not even the example store's built-ins.
    found = testing.OrderAnalysis(c, declarations=nothing).races()
    self.assertTrue(found and all(r.across_devices for r in found), found)

  def test_a_declaration_that_says_nothing_of_devices_is_shared(self):
    c = on_every_device(lambda shard: jnp.zeros_like(shard))
    silent = Declarations(
      targets=(
        TargetDeclaration(WRITE, "write", 0, (0,), source="test"),
        TargetDeclaration(READ, "read", 0, (), source="test"),
      )
    )
    found = testing.OrderAnalysis(c, declarations=silent).races()
    self.assertTrue(found and all(r.across_devices for r in found), found)

  def test_the_runtime_shows_one_table_for_every_device(self):
    # Why shared is the default: the example store is one table for the
    # process. Each of two devices adds to one replicated slot; the slot
    # holds both writes, which a per-device object would not.
    testing.reset_slots()
    mesh = jax.make_mesh((2,), ("d",), devices=jax.devices()[:2])

    def body(h):
      testing.write_slot(h, 1.0)
      return h[None]

    fn = jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P("d"))
    jax.block_until_ready(jax.jit(fn)(jnp.int32(5)))
    writes = [r for r in testing.call_log() if r.kind == "write"]
    # Two devices' writes, both to the one slot 5 of one process-wide store.
    self.assertEqual([r.slots for r in writes], [(5,), (5,)])


class DevicesMoreTest(absltest.TestCase):
  def test_one_replicated_handle_under_two_names_races_across_devices(self):
    mesh = jax.make_mesh((test_util.NUM_CPU_DEVICES,), ("d",))

    def body(h, v):
      a = Resource(h, name="a")
      a.write(testing.write_slot, v)
      b = Resource(entangle(h, a.token), name="b")
      return a.token, b.read(testing.read_slot)[None]

    fn = jax.shard_map(
      body, mesh=mesh, in_specs=(P(), P()), out_specs=(P(), P("d"))
    )
    c = compiled(fn, jnp.int32(0), jnp.float32(1.0))
    found = testing.races(c)
    pairs = {frozenset((r.first.target, r.second.target)) for r in found}
    self.assertIn(frozenset({WRITE}), pairs)  # The write, on two devices.
    # Every device holds the same h: one object, whatever the names, so
    # the other device's read races too.
    self.assertIn(frozenset({WRITE, READ}), pairs)
    text = testing.module_text(c)
    if "sharding={replicated}" not in text:
      # Newer XLA leaves it out of the optimized text (the Compiled says
      # it): the text alone lets the names decide (documented).
      alone = testing.races(text)
      self.assertNotIn(
        frozenset({WRITE, READ}),
        {frozenset((r.first.target, r.second.target)) for r in alone},
      )

  def test_host_callbacks_are_shared_across_devices(self):
    mesh = jax.make_mesh((test_util.NUM_CPU_DEVICES,), ("d",))

    def bump(x):
      return np.int32(x)

    def body(x):
      return io_callback(bump, jax.ShapeDtypeStruct((), jnp.int32), x[0])[None]

    fn = jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    ids = jax.device_put(
      jnp.arange(test_util.NUM_CPU_DEVICES, dtype=jnp.int32),
      NamedSharding(mesh, P("d")),
    )
    found = testing.races(jax.jit(fn).lower(ids).compile())
    self.assertLen(found, 1)  # The callback with itself, on two devices.
    self.assertTrue(found[0].across_devices)
    self.assertIn("host callbacks", str(found[0].first.declaration))
    # Control: on one device, one callback races with nothing.
    self.assertEqual(testing.races(compiled(body, jnp.arange(1))), [])


def offset_per_device(offset: bool, *, axis_index: bool = False):
  """A shard_map over the 8 CPU devices, each writing then reading the
  slot ``h + k`` for its k (``h + jnp.arange(8)`` built in the jit and
  split over the devices, or ``h + axis_index``), or with `offset` False
  the same ``h`` on every device."""
  mesh = jax.make_mesh(
    (test_util.NUM_CPU_DEVICES,), ("d",), axis_types=(AxisType.Auto,)
  )
  n = test_util.NUM_CPU_DEVICES

  def fn(h):
    steps = jnp.arange(n, dtype=jnp.int32) if offset and not axis_index else 0
    handles = h + steps + jnp.zeros(n, jnp.int32)

    def body(x):
      slot = x[0] + (jax.lax.axis_index("d") if offset and axis_index else 0)
      t = testing.write_slot(slot, 1.0)
      return testing.read_slot(t)[None]

    return jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))(
      handles
    )

  return jax.jit(fn).lower(jnp.int32(0)).compile()


class PerDeviceOffsetTest(absltest.TestCase):
  def test_a_handle_offset_per_device_is_another_object_on_each(self):
    self.assertEqual(testing.races(offset_per_device(True)), [])
    # Control: the same handle on every device still races across them.
    found = testing.races(offset_per_device(False))
    self.assertTrue(found and all(r.across_devices for r in found))

  def test_an_axis_index_offset_too(self):
    self.assertEqual(
      testing.races(offset_per_device(True, axis_index=True)), []
    )
    found = testing.races(offset_per_device(False, axis_index=True))
    self.assertTrue(found and all(r.across_devices for r in found))

  def test_what_tells_devices_apart_in_the_module(self):
    shared = Declarations(
      targets=(TargetDeclaration(W, "write", 0, devices="shared"),)
    )

    def pairs(header: str, entry: str) -> list:
      text = hlo_module(entry).replace(
        "HloModule rules, is_scheduled=true", f"HloModule rules, {header}"
      )
      return testing.OrderAnalysis(text, declarations=shared).races()

    entry = (
      "%h = s32[] parameter(0)\n%id = u32[] {ID}\n"
      "%m = u32[] constant({MASK})\n%k = u32[] and(%id, %m)\n"
      "%c = s32[] convert(%k)\n%s = s32[] add(%h, %c)\n"
      f"{call('one', 's')}"
    )

    def module(id_: str = "partition-id()", mask: str = "7") -> str:
      return entry.replace("{ID}", id_).replace("{MASK}", mask)

    partitions = "is_scheduled=true, num_partitions=8"
    self.assertEqual(pairs(partitions, module()), [])
    # Controls: a mask that folds devices together; replica-id, which is
    # the same on every partition; the same handle on every device.
    self.assertLen(pairs(partitions, module(mask="3")), 1)
    self.assertLen(pairs(partitions, module("replica-id()")), 1)
    self.assertLen(pairs(partitions, module("constant(0)")), 1)

    # A shard's start: partition-id times its size (1, 2); times 0: all
    # alike (the control).
    def scaled(size: str) -> str:
      return module(mask=size).replace("and(%id, %m)", "multiply(%id, %m)")

    self.assertEqual(pairs(partitions, scaled("1")), [])
    self.assertEqual(pairs(partitions, scaled("2")), [])
    self.assertLen(pairs(partitions, scaled("0")), 1)
    replicas = "is_scheduled=true, replica_count=8"
    self.assertEqual(pairs(replicas, module("replica-id()")), [])
    self.assertLen(pairs(replicas, module()), 1)


def records_sharding(c) -> bool:
  """Whether the optimized text says how its arguments are split over the
  devices (XLA of jax 0.10 does; that of jax 0.12 drops it)."""
  return "sharding={devices=" in testing.module_text(c)


W = "tp_set"
DECLARED = Declarations(
  targets=(TargetDeclaration(W, "write", 0, (0,), source="test"),)
)


def call(name: str, operand: str) -> str:
  return (
    f'%{name} = s32[] custom-call(%{operand}), custom_call_target="{W}", '
    "custom_call_has_side_effect=true"
  )


class HandWrittenModulesTest(absltest.TestCase):
  """The identity rule on constructs, each with a control."""

  def conflict(self, text: str) -> bool:
    analysis = testing.OrderAnalysis(text, declarations=DECLARED)
    a, b = analysis.select_ops(W)
    return analysis.conflict(a, b)

  def test_copies_and_bitcasts_pass_the_handle_on(self):
    text = hlo_module(
      "%p = s32[] parameter(0)\n%c = s32[] copy(%p)\n"
      "%b = s32[1] bitcast(%c)\n%r = s32[] reshape(%b)\n"
      f"{call('one', 'p')}\n{call('two', 'r')}\n"
      "%q = s32[] constant(7)"
    )
    analysis = testing.OrderAnalysis(text, declarations=DECLARED)
    a, b = analysis.select_ops(W)
    self.assertTrue(same(a, b))
    # Control: another parameter is not provably the same.
    other = text.replace("copy(%p)", "copy(%q)")
    analysis = testing.OrderAnalysis(other, declarations=DECLARED)
    a, b = analysis.select_ops(W)
    self.assertFalse(same(a, b))

  def test_a_declared_result_hands_back_the_object(self):
    text = hlo_module(
      "%p = s32[] parameter(0)\n%k = s32[] constant(1)\n"
      f"{call('one', 'k')}\n{call('two', 'one')}"
    )
    analysis = testing.OrderAnalysis(text, declarations=DECLARED)
    a, b = analysis.select_ops(W)
    self.assertTrue(same(a, b))
    # Control: a result not declared the object is a value of its own.
    undeclared = Declarations(
      targets=(TargetDeclaration(W, "write", 0, (), source="test"),)
    )
    analysis = testing.OrderAnalysis(text, declarations=undeclared)
    a, b = analysis.select_ops(W)
    self.assertFalse(same(a, b))

  def test_constants(self):
    two = "%a = s32[] constant(1)\n%b = s32[] constant(2)\n"
    text = hlo_module(f"{two}{call('one', 'a')}\n{call('two', 'b')}")
    self.assertFalse(self.conflict(text))
    same = hlo_module(f"{two}{call('one', 'a')}\n{call('two', 'a')}")
    self.assertTrue(self.conflict(same))  # The control.
    # Arrays of handles are not told apart by their literals.
    arrays = hlo_module(
      "%a = s32[2] constant({0, 1})\n%b = s32[2] constant({1, 2})\n"
      f"{call('one', 'a')}\n{call('two', 'b')}".replace(
        "s32[] custom", "s32[2] custom"
      )
    )
    self.assertTrue(self.conflict(arrays))

  def test_only_an_integer_first_operand_counts_as_a_resources_handle(self):
    def module(kind: str) -> str:
      marked = ', metadata={op_name="jit(f)/entangle_jax:write/ffi_call"}'
      calls = [
        f'%c{k} = s32[] custom-call(%k{k}), custom_call_target="U", '
        f"custom_call_has_side_effect=true{marked}"
        for k in (1, 2)
      ]
      return hlo_module(
        f"%k1 = {kind}[] constant(1)\n%k2 = {kind}[] constant(2)\n"
        + "\n".join(calls)
      )

    def conflict(text: str) -> bool:
      analysis = testing.OrderAnalysis(text, declarations=Declarations())
      a, b = analysis.select_ops("U")
      return analysis.conflict(a, b)

    self.assertFalse(conflict(module("s32")))  # Handles 1 and 2.
    # Control: a float there is data (the token passed second), not a
    # handle, and two different floats prove nothing.
    self.assertTrue(conflict(module("f32")))

  def test_a_constant_is_its_value_whatever_its_shape(self):
    def module(second: str) -> str:
      return hlo_module(
        f"%a = s32[] constant(3)\n%b = {second}\n"
        f"{call('one', 'a')}\n{call('two', 'b')}"
      )

    self.assertTrue(self.conflict(module("s32[1]{0} constant({3})")))
    self.assertTrue(self.conflict(module("u32[] constant(3)")))
    # Its bits: s32 -1 is u32 4294967295.
    minus = hlo_module(
      "%a = s32[] constant(-1)\n%b = u32[] constant(4294967295)\n"
      f"{call('one', 'a')}\n{call('two', 'b')}"
    )
    self.assertTrue(self.conflict(minus))
    self.assertFalse(self.conflict(module("s32[1]{0} constant({4})")))

  def test_a_bitcast_that_moves_elements_hides_which_one(self):
    def module(layout: str) -> str:
      return hlo_module(
        "%p = s32[2,3]{1,0} parameter(0)\n"
        f"%b = s32[3,2]{layout} bitcast(%p)\n"
        "%s = s32[1,1]{1,0} slice(%b), slice={[1:2], [1:2]}\n"
        "%r = s32[] reshape(%s)\n"
        "%t = s32[1,1]{1,0} slice(%p), slice={[1:2], [0:1]}\n"
        "%u = s32[] reshape(%t)\n"
        f"{call('one', 'r')}\n{call('two', 'u')}"
      )

    distinct = Declarations(
      targets=(TargetDeclaration(W, "write", 0, (0,), True, source="test"),)
    )

    def objects(text):
      analysis = testing.OrderAnalysis(text, declarations=distinct)
      return [op.accesses[0].object for op in analysis.select_ops(W)]

    # Default layouts: element 3 of %p, and element 3 of %p: one handle.
    one, two = objects(module("{1,0}"))
    assert one is not None and two is not None
    self.assertEqual((one.element, two.element), (3, 3))
    self.assertTrue(one.same(two))
    # A layout-changing bitcast reorders the elements: not followed.
    one, two = objects(module("{0,1}"))
    assert one is not None and two is not None
    self.assertNotEqual(one.root, two.root)  # An element of the bitcast.
    self.assertFalse(one.same(two) or one.distinct(two))  # May be one.

  def test_a_long_chain_is_followed_without_deep_recursion(self):
    links = [
      f"%e{k} = s32[] custom-call(%e{k - 1}, %v), "
      f'custom_call_target="{ENTANGLE}", '
      "output_to_operand_aliasing={{}: (0, {})}"
      for k in range(1, 3001)
    ]
    text = hlo_module(
      "%e0 = s32[] parameter(0)\n%v = f32[] parameter(1)\n"
      + "\n".join(links)
      + f"\n{call('one', 'e0')}\n{call('two', 'e3000')}"
    )
    self.assertTrue(self.conflict(text))  # One handle, through 3000 links.

  def test_a_declared_operand_the_call_lacks_is_an_error(self):
    text = hlo_module(f"%p = s32[] parameter(0)\n{call('one', 'p')}")
    wrong = Declarations(
      targets=(TargetDeclaration(W, "write", 3, source="test"),)
    )
    with self.assertRaisesRegex(ValueError, r"names operand 3, but %one"):
      testing.OrderAnalysis(text, declarations=wrong).races([W])

  def test_a_declared_result_the_call_lacks_is_an_error(self):
    text = hlo_module(
      f"%p = s32[] parameter(0)\n{call('one', 'p')}\n{call('two', 'one')}"
    )
    wrong = Declarations(
      targets=(TargetDeclaration(W, "write", 0, (7,), source="x.toml"),)
    )
    with self.assertRaisesRegex(
      ValueError,
      r"x\.toml: target 'tp_set': returns_object = \[7\] names result 7, "
      r"but %one \(line \d+\) has 1 result",
    ):
      testing.OrderAnalysis(text, declarations=wrong).races([W])
    # Control: result 0 exists, and is the handle's type.
    self.assertTrue(self.conflict(text))

  def test_a_declared_result_of_another_shape_is_an_error(self):
    text = hlo_module(
      "%p = s32[] parameter(0)\n"
      '%one = (f32[2]{0}, s32[]) custom-call(%p), custom_call_target="tp_set", '
      "custom_call_has_side_effect=true\n"
      "%g = s32[] get-tuple-element(%one), index=1\n"
      '%two = (f32[2]{0}, s32[]) custom-call(%g), custom_call_target="tp_set", '
      "custom_call_has_side_effect=true"
    )
    wrong = Declarations(
      targets=(TargetDeclaration(W, "write", 0, (0,), source="x.toml"),)
    )
    with self.assertRaisesRegex(
      ValueError,
      r"x\.toml: target 'tp_set': returns_object = \[0\] names result 0, "
      r"but %one \(line \d+\) returns f32\[2\] there, not the object "
      r"operand's s32\[\]",
    ):
      testing.OrderAnalysis(text, declarations=wrong).races([W])
    # Control: result 1 is an s32 scalar, as the handle is: the object.
    right = Declarations(
      targets=(TargetDeclaration(W, "write", 0, (1,), source="x.toml"),)
    )
    analysis = testing.OrderAnalysis(text, declarations=right)
    a, b = analysis.select_ops(W)
    self.assertTrue(same(a, b))

  def test_loop_state_carried_unchanged(self):
    body = (
      "%s = (s32[], s32[]) parameter(0)\n"
      "%h = s32[] get-tuple-element(%s), index=0\n"
      "%i = s32[] get-tuple-element(%s), index=1\n"
      f"{call('inner', 'h')}\n"
      "ROOT %t = (s32[], s32[]) tuple({carried}, %i)"
    )
    condition = (
      "%c = (s32[], s32[]) parameter(0)\nROOT %f = pred[] constant(false)"
    )

    def module(carried: str) -> str:
      return hlo_module(
        "%p = s32[] parameter(0)\n%z = s32[] constant(0)\n"
        f"{call('outer', 'p')}\n"
        "%init = (s32[], s32[]) tuple(%p, %z)\n"
        "%w = (s32[], s32[]) while(%init), condition=%cond, body=%body",
        body=body.replace("{carried}", carried),
        cond=condition,
      )

    self.assertTrue(self.conflict(module("%h")))
    # The declared write hands back the object: still the same.
    self.assertTrue(self.conflict(module("%inner")))
    # Control: a loop that carries something else holds another value in
    # later iterations; the body's handle is then not provably the outer.
    analysis = testing.OrderAnalysis(module("%i"), declarations=DECLARED)
    outer, inner = analysis.select_ops(W)
    self.assertFalse(same(outer, inner))


if __name__ == "__main__":
  absltest.main()
