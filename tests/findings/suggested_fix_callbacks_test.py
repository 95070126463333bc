"""Every fix the report suggests, followed as written, for host callbacks
that the usual fix cannot order through (issue 67, defects 1 and 5):

* a ``jax.debug.callback`` between a write and a read of one slot: it
  returns no array, so nothing can wait for it. ``in_program_order`` is
  suggested for the pairs it fixes; followed, it leaves only the pair of
  the callback and the read, for which it is not suggested again, and
  that pair's own fix (give the callback a result, and make the read
  consume it) leaves none;
* the same with an ``io_callback`` that returns nothing, which the
  transform gives a result: suggested, and followed it leaves no race;
* an ``io_callback`` whose only operand holds no element: an ``entangle``
  on that operand orders nothing (XLA replaces it by a constant), so the
  fix gives the callback one more operand with an element, which its
  function ignores; and ``in_program_order``, suggested, does the same.

Each with its control at run time: the plain program reads before the
write, or runs the callback before the write, on this machine's XLA:CPU;
the fixes never do.
"""

import re
import warnings

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.experimental import io_callback

import entangle_jax
from entangle_jax import testing
from entangle_jax.testing import example_store
from entangle_jax.testing._findings import from_analysis
from tests.callback_programs import (
  EVENTS,
  debug_between,
  io_between,
  log_int,
)

RUNS = 10
SLOT = 41
_SUGGESTED = re.compile(
  r"`(jax\.jit\(entangle_jax\.in_program_order\(.+?\)\))`"
)


def debug_between_by_hand(slot, value):
  """The fixes of `debug_between`'s pairs, written out: the read takes the
  write's token, and the callback, made an io_callback with a result
  (`log_int`), comes after the write; the read's token is entangled with
  the callback's result."""
  token = testing.write_slot(slot, value)
  done = io_callback(
    log_int,
    jax.ShapeDtypeStruct((), jnp.int32),
    entangle_jax.entangle(value, token),
  )
  return testing.read_slot(entangle_jax.entangle(token, done))


def empty_operand(slot, value):
  token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
  seen = io_callback(
    log_int, jax.ShapeDtypeStruct((), jnp.int32), jnp.zeros((0,), jnp.float32)
  )
  return seen, token


def empty_operand_by_hand(slot, value):
  """The report's fix, written out: one more operand with an element,
  entangled with the write's result, which the function ignores."""
  token = testing.write_slot(slot, jnp.sin(value) + 1.0, delay_us=2000)
  carrier = entangle_jax.entangle(jnp.zeros(()), token)
  seen = io_callback(
    lambda *a: log_int(*a[:-1]),
    jax.ShapeDtypeStruct((), jnp.int32),
    jnp.zeros((0,), jnp.float32),
    carrier,
  )
  return seen, token


def arguments():
  """The slot and the value, made when a test asks (an array made at
  import would start JAX's backend)."""
  return (jnp.int32(SLOT), jnp.float32(1.0))


def compiled(fn):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # The transform's, tested elsewhere.
    return fn.lower(*arguments()).compile()


def report(fn) -> str:
  return testing.format_races(testing.races(compiled(fn)))


def follow(text: str, fn):
  """The one ``in_program_order`` fix `text` suggests, evaluated."""
  (suggested,) = set(_SUGGESTED.findall(text))
  self_name = fn.__name__
  assert suggested == f"jax.jit(entangle_jax.in_program_order({self_name}))"
  namespace = {"jax": jax, "entangle_jax": entangle_jax, self_name: fn}
  return eval(suggested, namespace)


def run(fn, value: float):
  testing.reset_slots()
  del EVENTS[:]
  out = jax.block_until_ready(fn(jnp.int32(SLOT), jnp.float32(value)))
  return out, testing.call_log(), [seq for seq, _ in EVENTS]


def wrong_reads(fn) -> int:
  return sum(float(run(fn, k + 1.0)[0]) != k + 1.0 for k in range(RUNS))


def callback_before_write(fn) -> int:
  early = 0
  for k in range(RUNS):
    _, calls, seen = run(fn, k + 1.0)
    (write,) = [c for c in calls if c.kind == "write"]
    early += any(s < write.end for s in seen)
  return early


class SuggestedFixCallbacksTest(absltest.TestCase):
  def test_debug_callback_between_write_and_read(self):
    text = report(jax.jit(debug_between))
    fixed = follow(text, debug_between)
    left = testing.races(compiled(fixed))
    # What is left is the pair nothing can wait for, and the report does
    # not suggest the transform for it again.
    self.assertLen(left, 1)
    targets = {left[0].first.target, left[0].second.target}
    self.assertIn(example_store.READ_SLOT_TARGET, targets)
    left_text = testing.format_races(left)
    self.assertEqual(_SUGGESTED.findall(left_text), [])
    self.assertIn("the earlier call returns no array", left_text)
    self.assertIsNone(
      from_analysis.program_order_fix(left, from_analysis.cause_of(left[0]))
    )
    self.assertEqual(wrong_reads(fixed), 0)
    # That pair's own fix, and the others', by hand: no race, right reads.
    hand = jax.jit(debug_between_by_hand)
    self.assertEqual(testing.races(compiled(hand)), [])
    self.assertEqual(wrong_reads(hand), 0)
    if not wrong_reads(jax.jit(debug_between)):
      self.skipTest("this XLA ran the write first, unordered")

  def test_io_callback_between_write_and_read(self):
    fixed = follow(report(jax.jit(io_between)), io_between)
    self.assertEqual(testing.races(compiled(fixed)), [])
    self.assertEqual(wrong_reads(fixed), 0)
    if not wrong_reads(jax.jit(io_between)):
      self.skipTest("this XLA ran the write first, unordered")

  def test_io_callback_whose_operand_holds_no_element(self):
    text = report(jax.jit(empty_operand))
    self.assertIn("its operands hold no element", text)
    fixed = follow(text, empty_operand)
    self.assertEqual(testing.races(compiled(fixed)), [])
    self.assertEqual(callback_before_write(fixed), 0)
    hand = jax.jit(empty_operand_by_hand)
    self.assertEqual(testing.races(compiled(hand)), [])
    self.assertEqual(callback_before_write(hand), 0)
    if not callback_before_write(jax.jit(empty_operand)):
      self.skipTest("this XLA ran the write first, unordered")


if __name__ == "__main__":
  absltest.main()
