"""`in_program_order` on long programs of native calls on traced handles
(issue 67, the cost): the entangles it adds are those a careful hand adds,
and the pairs it asks the conflict rule about grow with the calls, not
with their square.

* write and read back on ``slots[k % 4]`` of an argument array: any two
  elements may be one slot (the store does not declare its elements
  distinct), so each write comes after the read before it, one entangle a
  write after the first; the earlier calls that write already comes after
  are not asked about again;
* one write on ``slots[0]``, then reads of ``slots[k % 4]``: every read
  after the write, and one entangle, on ``slots``, orders them all, as
  ``entangle(slots, written)`` by hand;
* ``jax.grad(in_program_order(f))`` of k custom_vjps whose backward passes
  make native calls takes the entangles ``in_program_order(jax.grad(f))``
  takes (it took about twice as many: an order value into and out of each
  custom_vjp, and the backward chain's cotangent, each an entangle where
  one call's result, converted, orders as well).

Each count comes with the race check on the same program (none ordered,
some for plain ``jax.jit``: the control) and a run that reads what was
written.
"""

import gc
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import in_program_order, testing
from entangle_jax._src.program_order import call_log, interpreter
from tests.program_order import program_order_programs as programs

ENTANGLE = '"entangle_jax_entangle"'
SLOTS = 4
# Slots of the example store these tests write, apart from other tests'.
FIRST_SLOT = 40


def entangles(lowered) -> int:
  """The entangle calls of `lowered`'s module as JAX lowered it; XLA's
  optimized module keeps them all (checked here too)."""
  found = lowered.as_text().count("@entangle_jax_entangle")
  assert testing.module_text(lowered).count(ENTANGLE) == found
  return found


def write_read_pairs(pairs: int):
  def program(slots, x):
    reads = []
    for k in range(pairs):
      token = testing.write_slot(slots[k % SLOTS], x + k)
      reads.append(testing.read_slot(token))
    return jnp.stack(reads)

  return program


def reads_after_one_write(reads: int):
  def program(slots, x):
    testing.write_slot(slots[0], x)
    return jnp.stack(
      [testing.read_slot(slots[k % SLOTS]) for k in range(reads)]
    )

  return program


def _slots():
  return jnp.arange(FIRST_SLOT, FIRST_SLOT + SLOTS, dtype=jnp.int32)


def questions(program, args) -> int:
  """How many pairs of calls the transform asks the conflict rule about
  while it traces `program`."""
  counted = mock.Mock(side_effect=call_log.conflicts)
  with mock.patch.object(call_log, "conflicts", counted):
    jax.jit(in_program_order(program)).lower(*args)
  return counted.call_count


class TracedHandlesTest(absltest.TestCase):
  def test_each_write_after_the_read_before_it_and_no_more(self):
    pairs = 12
    program = write_read_pairs(pairs)
    args = (_slots(), jnp.float32(3.0))
    self.assertNotEmpty(testing.races(jax.jit(program).lower(*args)))
    lowered = jax.jit(in_program_order(program)).lower(*args)
    self.assertEqual(testing.races(lowered), [])
    # By hand: `entangle(slots[k % 4], reads[-1])` before each write but
    # the first.
    self.assertEqual(entangles(lowered), pairs - 1)
    read = np.asarray(lowered.compile()(*args))
    np.testing.assert_array_equal(read, 3.0 + np.arange(pairs))

  def test_the_questions_grow_with_the_calls(self):
    # Each write comes after every earlier call, and every later call
    # that conflicts with one of those conflicts with the write: only the
    # calls since the last write are asked about. Asking about every
    # earlier call took 75 and 930 questions here (the square).
    args = (_slots(), jnp.float32(0.0))
    asked = [questions(write_read_pairs(n), args) for n in (10, 40)]
    # The count sees the questions asked (the rule is asked where the call
    # log looks for witnesses): an empty count would pass any bound.
    self.assertGreater(asked[0], 0)
    self.assertLessEqual(asked[0], 2 * 10)
    self.assertLessEqual(asked[1], 2 * 40)


class ReadsOfOneArrayTest(absltest.TestCase):
  def test_one_entangle_orders_every_read_after_the_write(self):
    reads = 24
    program = reads_after_one_write(reads)
    args = (_slots(), jnp.float32(7.0))
    self.assertNotEmpty(testing.races(jax.jit(program).lower(*args)))
    lowered = jax.jit(in_program_order(program)).lower(*args)
    self.assertEqual(testing.races(lowered), [])
    self.assertEqual(entangles(lowered), 1)  # `entangle(slots, written)`.
    read = np.asarray(lowered.compile()(*args))
    np.testing.assert_array_equal(read[::SLOTS], np.full(reads // SLOTS, 7.0))

  def test_each_element_of_the_entangled_array_is_taken_once(self):
    # 24 reads of 4 elements: 4 slices of the entangled array (and the
    # write's own), not one a read.
    lowered = jax.jit(in_program_order(reads_after_one_write(24))).lower(
      _slots(), jnp.float32(7.0)
    )
    self.assertEqual(lowered.as_text().count("stablehlo.slice"), SLOTS + 1)

  def test_a_read_after_a_second_write_takes_its_own(self):
    # The shared entangle is for one set of earlier writes: a read after
    # a second write waits for that one, through a second entangle.
    def program(slots, x):
      testing.write_slot(slots[0], x)
      first = [testing.read_slot(slots[k]) for k in range(SLOTS)]
      testing.write_slot(slots[1], x + 1)
      second = [testing.read_slot(slots[k]) for k in range(SLOTS)]
      return jnp.stack(first), jnp.stack(second)

    args = (_slots(), jnp.float32(5.0))
    lowered = jax.jit(in_program_order(program)).lower(*args)
    self.assertEqual(testing.races(lowered), [])
    # The first reads, the second write after them, the second reads.
    self.assertEqual(entangles(lowered), 3)
    first, second = map(np.asarray, lowered.compile()(*args))
    self.assertEqual(first[0], 5.0)
    self.assertEqual(second[0], 5.0)
    self.assertEqual(second[1], 6.0)


class CollectorTest(absltest.TestCase):
  """The cyclic collector is paused while the transform evaluates the
  program (a full collection there scans everything and frees nothing),
  and runs again after it, whatever happened."""

  def lower_seeing(self, run):
    program = reads_after_one_write(4)
    args = (_slots(), jnp.float32(1.0))
    with mock.patch.object(interpreter.Context, "run", run):
      jax.jit(in_program_order(program)).lower(*args)

  def test_paused_while_it_evaluates_and_running_after(self):
    seen = []
    real = interpreter.Context.run

    def run(ctx, *args):
      seen.append(gc.isenabled())
      return real(ctx, *args)

    self.lower_seeing(run)
    self.assertEqual(seen, [False])
    self.assertTrue(gc.isenabled())

  def test_running_after_an_error(self):
    def run(ctx, *args):
      raise RuntimeError("in the evaluation")

    with self.assertRaisesRegex(RuntimeError, "in the evaluation"):
      self.lower_seeing(run)
    self.assertTrue(gc.isenabled())

  def test_left_paused_when_the_caller_paused_it(self):
    gc.disable()
    try:
      self.lower_seeing(interpreter.Context.run)
      self.assertFalse(gc.isenabled())
    finally:
      gc.enable()


def backward_counts(k: int):
  """k custom_vjps, each backward pass a read and a write of the count
  slot, after the forward write of 10 (`counted_after`)."""

  def inner(x):
    for _ in range(k):
      x = programs.counted(x)
    return x

  return programs.counted_after(inner)


@jax.custom_vjp
def write_read(x):
  return testing.read_slot(testing.write_slot(FIRST_SLOT, x)) * x


def _write_read_fwd(x):
  return write_read(x), x


def _write_read_bwd(x, ct):
  del x
  return (testing.read_slot(testing.write_slot(FIRST_SLOT, ct)) * ct,)


write_read.defvjp(_write_read_fwd, _write_read_bwd)


def forward_and_backward(k: int):
  """k custom_vjps whose forward and backward passes each write and read
  one slot."""

  def loss(x):
    for _ in range(k):
      x = write_read(x)
    return x

  return loss


class GradOfTheTransformTest(absltest.TestCase):
  def test_no_more_entangles_than_the_transform_of_the_grad(self):
    for name, make in (
      ("backward calls", backward_counts),
      ("forward and backward calls", forward_and_backward),
    ):
      for k in (1, 4):
        with self.subTest(name, k=k):
          loss = make(k)
          self.assertNotEmpty(testing.races(jax.jit(jax.grad(loss)).lower(1.0)))
          outside = jax.jit(in_program_order(jax.grad(loss))).lower(1.0)
          inside = jax.jit(jax.grad(in_program_order(loss))).lower(1.0)
          self.assertEqual(testing.races(outside), [])
          self.assertEqual(testing.races(inside), [])
          self.assertLessEqual(entangles(inside), entangles(outside))

  def test_backward_passes_still_count_after_the_forward_write(self):
    k = 4
    fixed = jax.jit(jax.grad(in_program_order(backward_counts(k))))
    compiled = fixed.lower(1.0).compile()
    # 2 k + 2 before (10): one a backward pass, one handing the chain's
    # cotangent on after each but the last, two to start the chain, and
    # the forward write of 10 after the first; now the cotangent handed on
    # and the chain's start are converted results, no entangle.
    self.assertEqual(entangles(fixed.lower(1.0)), k + 1)
    for _ in range(3):
      value, count, _ = programs.ran(compiled, programs.COUNT_SLOT, 1.0)
      self.assertEqual((value, count), (2.0**k, 10.0 + k))


if __name__ == "__main__":
  absltest.main()
