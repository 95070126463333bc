"""Calls `in_program_order` cannot order through their own arrays (issue
67, defects 1 and 5), each checked at run time against the plain program,
which goes wrong on this machine's XLA:CPU:

* a host callback that returns nothing between a write and a read of one
  slot: the read's order after the write was dropped as "covered" by the
  callback, which nothing can wait for, and the read ran first in every
  run. The read is now entangled with the write itself; an ``io_callback``
  is given one more result (its function never sees it), so the read
  waits for the callback too, and a ``jax.debug.callback``, which can
  have no result, is named in a warning that says which order the read
  keeps;
* a host callback whose only operand holds no element (or that takes
  none): an entangle on such an operand orders nothing, since XLA replaces
  it by a constant, and the transform raised. The callback is now given
  one more operand of one element, entangled with the earlier calls,
  which its function never sees; an FFI call, whose operands are its
  handler's, still raises, naming it.
"""

import warnings

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.experimental import io_callback

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax.testing import example_store
from tests.callback_programs import (
  EVENTS,
  debug_between,
  io_between,
  log,
  log_int,
)

RUNS = 10
SLOT = 40  # Each program's slot; the store is reset before each run.


def empty_operand(slot, value):
  """A slow write, then a callback whose one operand holds no element;
  the write's value comes from a computation, so that XLA:CPU runs the
  callback first when nothing orders it."""
  token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
  seen = io_callback(
    log_int, jax.ShapeDtypeStruct((), jnp.int32), jnp.zeros((0,), jnp.float32)
  )
  return seen, token


def debug_empty_operand(slot, value):
  token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
  jax.debug.callback(log, jnp.zeros((0,), jnp.float32))
  return token


def debug_no_operand(slot, value):
  token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
  jax.debug.callback(log)
  return token


def run(fn, value: float):
  """Runs `fn` once on a reset store: what it returned, the store's calls
  and the callbacks' events."""
  testing.reset_slots()
  del EVENTS[:]
  out = jax.block_until_ready(fn(jnp.int32(SLOT), jnp.float32(value)))
  return out, testing.call_log(), list(EVENTS)


def wrong_reads(fn) -> int:
  """Runs in which the read did not see the write before it."""
  wrong = 0
  for k in range(RUNS):
    out, _, _ = run(fn, k + 1.0)
    wrong += float(out) != k + 1.0
  return wrong


def callbacks_before_the_write(fn) -> int:
  """Runs in which a callback ran before the write had ended."""
  early = 0
  for k in range(RUNS):
    _, calls, events = run(fn, k + 1.0)
    (write,) = [c for c in calls if c.kind == "write"]
    early += any(seq < write.end for seq, _ in events)
  return early


def lowered_quietly(fn):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = fn.lower(jnp.int32(SLOT), jnp.float32(1.0)).compile()
  return compiled, [str(w.message) for w in caught]


def pairs(compiled) -> set[tuple[str, ...]]:
  """The races of `compiled` as pairs of (shortened) target names."""
  short = {
    example_store.WRITE_SLOT_TARGET: "write",
    example_store.READ_SLOT_TARGET: "read",
  }
  return {
    tuple(sorted(short.get(op.target or "", "callback") for op in race))
    for race in ((r.first, r.second) for r in testing.races(compiled))
  }


class CallThatReturnsNothingTest(absltest.TestCase):
  def test_debug_callback_keeps_the_reads_order_after_the_write(self):
    fixed = jax.jit(in_program_order(debug_between))
    compiled, messages = lowered_quietly(fixed)
    # Only the pair nothing can order is left: the callback and the read.
    self.assertEqual(pairs(compiled), {("callback", "read")})
    (message,) = [m for m in messages if "returns no array" in m]
    self.assertIn(
      f"`{example_store.READ_SLOT_TARGET}` cannot be ordered after", message
    )
    self.assertIn("debug_callback", message)
    self.assertIn(
      "Its order after the other earlier calls it conflicts with "
      f"(`{example_store.WRITE_SLOT_TARGET}`) is kept",
      message,
    )
    self.assertEqual(wrong_reads(fixed), 0)
    # The callback is still ordered after the write.
    self.assertEqual(callbacks_before_the_write(fixed), 0)
    self.assertEqual(
      pairs(
        jax.jit(debug_between)
        .lower(jnp.int32(SLOT), jnp.float32(1.0))
        .compile()
      ),
      {("callback", "read"), ("callback", "write"), ("read", "write")},
    )
    if not wrong_reads(jax.jit(debug_between)):
      self.skipTest("this XLA ran the write first, unordered")

  def test_io_callback_is_given_a_result_to_wait_for(self):
    fixed = jax.jit(in_program_order(io_between))
    compiled, messages = lowered_quietly(fixed)
    self.assertEqual(testing.races(compiled), [])
    self.assertEqual([m for m in messages if "no array" in m], [])
    self.assertEqual(wrong_reads(fixed), 0)
    # Write, callback, read, one after the other; the callback saw the
    # one argument the program gave it.
    for k in range(RUNS):
      _, calls, events = run(fixed, k + 1.0)
      write, read = calls
      ((seq, shapes),) = events
      self.assertLess(write.end, seq)
      self.assertLess(seq, read.start)
      self.assertEqual(shapes, ((),))
    # The program as the user wrote it returns what it did.
    out = fixed(jnp.int32(SLOT), jnp.float32(3.0))
    self.assertEqual(jax.eval_shape(io_between, 0, 1.0).shape, out.shape)
    if not wrong_reads(jax.jit(io_between)):
      self.skipTest("this XLA ran the write first, unordered")


class OperandOfNoElementTest(absltest.TestCase):
  def check(self, fn, argument_shapes):
    fixed = jax.jit(in_program_order(fn))
    compiled, _ = lowered_quietly(fixed)
    self.assertEqual(testing.races(compiled), [])
    self.assertEqual(callbacks_before_the_write(fixed), 0)
    # The callback saw the arguments the program gave it, no more.
    _, _, events = run(fixed, 1.0)
    self.assertEqual([shapes for _, shapes in events], [argument_shapes])
    # The control: unordered, the callback ran before the write ended.
    if not callbacks_before_the_write(jax.jit(fn)):
      self.skipTest("this XLA ran the write first, unordered")

  def test_io_callback_gets_an_operand_of_one_element(self):
    self.check(empty_operand, ((0,),))

  def test_debug_callback_gets_an_operand_of_one_element(self):
    self.check(debug_empty_operand, ((0,),))

  def test_debug_callback_with_no_operand_gets_one(self):
    self.check(debug_no_operand, ())

  def test_hand_entangle_on_it_orders_nothing(self):
    # Why: the entangle on the operand of no element leaves the race, and
    # the callback still runs first.
    def by_hand(slot, value):
      token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
      empty = entangle_jax.entangle(jnp.zeros((0,), jnp.float32), token)
      seen = io_callback(log_int, jax.ShapeDtypeStruct((), jnp.int32), empty)
      return seen, token

    hand = jax.jit(by_hand)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      self.assertNotEmpty(
        testing.races(hand.lower(jnp.int32(SLOT), jnp.float32(1.0)).compile())
      )

  def test_an_ffi_call_still_raises_naming_it(self):
    target = "program_order_no_result_undeclared"

    def f(slot):
      testing.write_slot(slot, 1.0)
      call = jax.ffi.ffi_call(
        target, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
      )
      return call(jnp.zeros((0,), jnp.float32))

    with self.assertRaisesRegex(
      NotImplementedError, f"`{target}`.*no operand with elements"
    ):
      jax.jit(in_program_order(f)).lower(jnp.int32(SLOT))


if __name__ == "__main__":
  absltest.main()
