"""Every fix the report suggests, followed, on three ordinary shapes that
race plain: a ``custom_partitioning`` around an FFI call (how an FFI call
gets a sharding rule), a ``custom_vmap`` around one, and
``lax.associative_scan`` whose combine function makes a native call (on
slices of no element too). Where the report suggests ``in_program_order``,
the suggestion is evaluated as written: no race is left and every read is
right. The hand-written ``entangle`` it describes is followed too.

Each has its control: the plain program races (``testing.races``), and
reads wrong at run time where this machine runs its calls at once.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental.custom_partitioning import custom_partitioning

import entangle_jax
from entangle_jax import testing
from entangle_jax.testing._findings import from_analysis
from tests.test_util import compiled

HAZARDS = 8
RUNS = 15
DELAY_US = 1000
_SUGGESTED = re.compile(
  r"`(jax\.jit\(entangle_jax\.in_program_order\(.+?\)\))`"
)


def slow_read(token):
  return testing.read_slot(token, delay_us=DELAY_US)


@jax.custom_batching.custom_vmap
def vmapped_read(token):
  return slow_read(token)


@vmapped_read.def_vmap
def _vmapped_read_rule(axis_size, in_batched, token):
  del axis_size
  return slow_read(token), in_batched[0]


@custom_partitioning
def partitioned_read(token):
  return slow_read(token)


PARTITIONED: list[int] = []  # One entry each time XLA asks for the rule.


def _partition(mesh, arg_shapes, result_shape):
  del result_shape
  PARTITIONED.append(1)
  sharding = arg_shapes[0].sharding
  return mesh, slow_read, sharding, (sharding,)


partitioned_read.def_partition(
  partition=_partition,
  infer_sharding_from_operands=(
    lambda mesh, arg_shapes, result_shape: arg_shapes[0].sharding
  ),
  sharding_rule=" -> ",  # A scalar handle.
)


def scan_read(token):
  """A scan whose combine function reads the slot `token` names, slowly:
  ``associative_scan`` applies it to slices, some of no element."""
  xs = jnp.arange(1.0, 9.0)

  def combine(a, b):
    return a + b * slow_read(jnp.broadcast_to(token, a.shape))

  return jax.lax.associative_scan(combine, xs)


def hazards(read, first, name):
  """`HAZARDS` slots (from `first`), each written, read through `read`,
  then written again with nothing ordering that write after the read;
  beside a large array, so that XLA:CPU runs the calls at once."""

  def step(big):
    reads, last = [], []
    for i in range(HAZARDS):
      slot = jnp.int32(first + i)
      token = testing.write_slot(slot, 1.0)
      reads.append(read(token))
      last.append(testing.write_slot(slot, 2.0))
    return reads, jnp.sin(big).sum(), last

  step.__name__ = name
  return step


def expected(read):
  if read is scan_read:
    return np.cumsum(np.arange(1.0, 9.0))
  return np.float32(1.0)


def by_hand(read, first):
  """The report's first fix, written out: the second write's slot
  entangled with the read's result."""

  def step(big):
    reads, last = [], []
    for i in range(HAZARDS):
      slot = jnp.int32(first + i)
      token = testing.write_slot(slot, 1.0)
      r = read(token)
      reads.append(r)
      later = entangle_jax.entangle(slot, r)
      last.append(testing.write_slot(later, 2.0))
    return reads, jnp.sin(big).sum(), last

  return step


def wrong_runs(fn, read, big) -> int:
  want = expected(read)
  return sum(
    any(not np.allclose(np.asarray(r), want) for r in fn(big)[0])
    for _ in range(RUNS)
  )


class SuggestedFixShapesTest(absltest.TestCase):
  def walk(self, read, first, name):
    big = jnp.ones(1 << 16)
    step = hazards(read, first, name)
    racy = compiled(step, big)
    races = testing.races(racy)
    self.assertNotEmpty(races)  # The control.
    text = testing.format_races(races)
    suggested = set(_SUGGESTED.findall(text))
    self.assertEqual(
      suggested, {f"jax.jit(entangle_jax.in_program_order({step.__name__}))"}
    )
    namespace = {"jax": jax, "entangle_jax": entangle_jax}
    fixed = eval(suggested.pop(), {**namespace, step.__name__: step})
    self.assertEqual(testing.races(fixed.lower(big).compile()), [])
    self.assertEqual(wrong_runs(fixed, read, big), 0)
    # The report's first fix for the same-object pairs, by hand: none of
    # them is left (a scan's reads of a broadcast handle stay "may be one
    # object" with the other slots' calls, which the transform orders
    # too), and every read is right.
    hand = jax.jit(by_hand(read, first))
    left = testing.races(hand.lower(big).compile())
    self.assertNotIn("EJ002", {from_analysis.cause_of(r).code for r in left})
    self.assertEqual(wrong_runs(hand, read, big), 0)
    plain = wrong_runs(jax.jit(step), read, big)
    if not plain:
      self.skipTest("this XLA happened to run every read first, unordered")

  def test_custom_partitioning(self):
    self.walk(partitioned_read, 0, "partitioned_step")

  def test_custom_vmap(self):
    self.walk(vmapped_read, 16, "vmapped_step")

  def test_associative_scan(self):
    self.walk(scan_read, 32, "scan_step")

  def test_custom_partitioning_keeps_its_rule_when_sharded(self):
    # Under a sharded jit, XLA's partitioner calls the user's partition
    # rules: the transform binds the primitives again with them. Each call
    # is a custom_partitioning (a side-effecting call needs a sharding).
    mesh = jax.make_mesh((2,), ("x",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))

    def partitioned(fn, rule):
      wrapped = custom_partitioning(fn)

      def partition(mesh, arg_shapes, result_shape):
        del result_shape
        PARTITIONED.append(1)
        sharding = arg_shapes[0].sharding
        return mesh, fn, sharding, tuple(a.sharding for a in arg_shapes)

      wrapped.def_partition(
        partition=partition,
        infer_sharding_from_operands=(
          lambda mesh, arg_shapes, result_shape: arg_shapes[0].sharding
        ),
        sharding_rule=rule,
      )
      return wrapped

    write = partitioned(lambda s, v: testing.write_slot(s, v), "i, i -> i")
    read = partitioned(lambda t: testing.read_slot(t), "i -> i")

    def step(slots):
      token = write(slots, jnp.ones(slots.shape))
      value = read(token)
      write(slots, jnp.full(slots.shape, 2.0))
      return value

    slots = jax.device_put(jnp.arange(52, 54, dtype=jnp.int32), rows)
    racy = compiled(step, slots)
    self.assertNotEmpty(testing.races(racy))  # The control.
    del PARTITIONED[:]
    fixed = jax.jit(entangle_jax.in_program_order(step))
    compiled_fixed = fixed.lower(slots).compile()
    self.assertNotEmpty(PARTITIONED)  # The user's rules ran.
    self.assertEqual(compiled_fixed(slots).tolist(), [1.0, 1.0])
    self.assertEqual(
      [r for r in testing.races(compiled_fixed) if not r.across_devices], []
    )

  def test_custom_vmap_keeps_its_rule_under_vmap(self):
    # vmap outside the transform: the user's rule batches the call (it
    # reads without the per-element loop), ordered after the write.
    def step(slots):
      token = testing.write_slot(slots, jnp.ones(slots.shape))
      value = vmapped_read(token)
      testing.write_slot(slots, jnp.full(slots.shape, 2.0))
      return value

    slots = jnp.arange(48, 52, dtype=jnp.int32).reshape(2, 2)
    racy = compiled(jax.vmap(step), slots)
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = jax.jit(jax.vmap(entangle_jax.in_program_order(step)))
    self.assertEqual(testing.races(fixed.lower(slots).compile()), [])
    self.assertEqual(fixed(slots).tolist(), [[1.0, 1.0], [1.0, 1.0]])
    jaxpr = jax.make_jaxpr(jax.vmap(entangle_jax.in_program_order(step)))(slots)
    self.assertNotIn("while", str(jaxpr))  # The rule, not a loop.


if __name__ == "__main__":
  absltest.main()
