"""``in_program_order`` and the race check read a call's footprint through
one door (`entangle_jax._src.access_policy.footprint`), so that after the
transform the check finds no pair, whatever the store's targets are
declared to do and however they are called.

Generated: each declaration of the store's write target and of its read
target (undeclared, "read", "write", "none", and one naming the object
operand), times four ways of calling them (plain calls, through a named
``Resource``, through an unnamed one, and a ``Resource`` write next to
plain reads): 100 programs. A target declared ``"none"`` but called
through ``Resource.write`` is a write to the check (the Resource's record
comes first); the transform used to take it for no call at all, and left
6 of these programs racing.

The control: the same programs under plain ``jax.jit`` race wherever a
call may write, so each program asks the transform for an order it must
make. And at run time, the read after the write sees the write in every
run under the transform."""

import itertools
from typing import Literal

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax import lax

import entangle_jax
from entangle_jax import Resource, in_program_order, testing
from entangle_jax._src.targets import in_code
from entangle_jax.testing import example_store

SLOT = 43
# What each of the two targets is declared to do (None: undeclared, the
# store's built-in declaration applies; "object": a write or read whose
# object is operand 0, the write handing it back).
Declared = Literal["read", "write", "none", "object"] | None
DECLARED: tuple[Declared, ...] = (None, "read", "write", "none", "object")
CALLS = ("plain", "named_resource", "resource", "resource_write_plain_reads")


def declare(target: str, declared: Declared, writes: bool) -> None:
  if declared is None:
    return
  if declared == "object":
    mode = "write" if writes else "read"
    returns = (0,) if writes else ()
    entangle_jax.declare_target(
      target, mode=mode, object=0, returns_object=returns
    )
  else:
    entangle_jax.declare_target(target, mode=declared)


def program(calls: str):
  """Read, write, read of one slot; the reads return what they saw, the
  last one the written value when the program's order is kept."""

  def plain(slot, value):
    before = testing.read_slot(slot)
    testing.write_slot(slot, value)
    return before, testing.read_slot(slot)

  def through_resource(slot, value, name=None):
    res = Resource(slot, name=name)
    before = res.read(testing.read_slot)
    res.write(lambda token: testing.write_slot(token, value))
    return before, res.read(testing.read_slot)

  def write_in_resource(slot, value):
    before = testing.read_slot(slot)
    res = Resource(slot, name="slots")
    res.write(lambda token: testing.write_slot(token, value))
    return before, testing.read_slot(slot)

  return {
    "plain": plain,
    "named_resource": lambda slot, value: through_resource(slot, value, "s"),
    "resource": through_resource,
    "resource_write_plain_reads": write_in_resource,
  }[calls]


def mode(declared: str | None, writes: bool) -> str:
  """What a plain call of the target touches, as declared."""
  if declared in (None, "object"):
    return "write" if writes else "read"
  return declared


def plain_jit_races(declared_write, declared_read, calls: str) -> bool:
  """Whether plain ``jax.jit`` of the program leaves a pair: two calls
  that touch the slot, one of them a write, made outside one
  ``Resource`` (which orders its own calls)."""
  if calls in ("named_resource", "resource"):
    return False
  write = "write" if calls != "plain" else mode(declared_write, True)
  read = mode(declared_read, False)
  return any(
    _conflict(*pair) for pair in ((read, write), (write, read), (read, read))
  )


def last_read_sees_the_write(declared_write, declared_read, calls) -> bool:
  """Whether the declarations in effect make the last read conflict with
  the write, so that the program's order must hold at run time (a
  declaration that says otherwise is the user's word, and obeyed)."""
  if calls in ("named_resource", "resource"):
    return True
  write = "write" if calls != "plain" else mode(declared_write, True)
  return _conflict(write, mode(declared_read, False))


def _conflict(a: str, b: str) -> bool:
  return "none" not in (a, b) and "write" in (a, b)


class ProgramOrderDeclarationsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.addCleanup(self._forget)

  def _forget(self):
    for target in (
      example_store.WRITE_SLOT_TARGET,
      example_store.READ_SLOT_TARGET,
    ):
      in_code.forget(target)

  def check(self, calls: str):
    args = (jnp.int32(SLOT), jnp.float32(5.0))
    for declared_write, declared_read in itertools.product(DECLARED, DECLARED):
      with self.subTest(write=declared_write, read=declared_read):
        self._forget()
        declare(example_store.WRITE_SLOT_TARGET, declared_write, True)
        declare(example_store.READ_SLOT_TARGET, declared_read, False)
        f = program(calls)
        ordered = jax.jit(in_program_order(f))
        self.assertEqual(list(testing.races(ordered.lower(*args))), [])
        plain = testing.races(jax.jit(f).lower(*args))
        # The control: without the transform, the program races where two
        # calls conflict that nothing orders.
        self.assertEqual(
          bool(plain), plain_jit_races(declared_write, declared_read, calls)
        )
        if last_read_sees_the_write(declared_write, declared_read, calls):
          testing.reset_slots()
          _, after = ordered(*args)
          self.assertEqual(float(after), 5.0)

  def test_plain_calls(self):
    self.check("plain")

  def test_calls_through_a_named_resource(self):
    self.check("named_resource")

  def test_calls_through_an_unnamed_resource(self):
    self.check("resource")

  def test_a_resource_write_among_plain_reads(self):
    self.check("resource_write_plain_reads")

  def test_a_write_declared_none_through_a_resource(self):
    """The shapes the transform got wrong: the write declared to touch
    nothing, made through a Resource next to plain reads. The control:
    under plain jit the check finds the pairs the transform must order."""
    args = (jnp.int32(SLOT), jnp.float32(5.0))
    for declared_read in (None, "read", "write"):
      with self.subTest(read=declared_read):
        self._forget()
        declare(example_store.WRITE_SLOT_TARGET, "none", True)
        declare(example_store.READ_SLOT_TARGET, declared_read, False)
        f = program("resource_write_plain_reads")
        self.assertNotEqual(list(testing.races(jax.jit(f).lower(*args))), [])
        ordered = jax.jit(in_program_order(f))
        self.assertEqual(list(testing.races(ordered.lower(*args))), [])
        testing.reset_slots()
        jax.block_until_ready(ordered(*args))
        kinds = [c.kind for c in testing.call_log()]
        self.assertEqual(kinds, ["read", "write", "read"])

  def test_a_write_declared_none_in_a_branch_of_a_resource_write(self):
    """The Resource's record is outside the branch's own named scopes
    (JAX traces each branch in a name stack of its own): the transform
    reads the call in the scopes it is made in, as the check does."""
    args = (jnp.int32(SLOT), jnp.float32(5.0))
    declare(example_store.WRITE_SLOT_TARGET, "none", True)

    def f(slot, value):
      before = testing.read_slot(slot)
      res = Resource(slot, name="slots")

      def write(token):
        return lax.cond(
          value > 0,
          lambda t: testing.write_slot(t, value),
          lambda t: t,
          token,
        )

      res.write(write)
      return before, testing.read_slot(slot)

    # The control: plain jit races (both reads with the write; jax 0.6.2
    # shows one of the pairs).
    self.assertNotEqual(list(testing.races(jax.jit(f).lower(*args))), [])
    ordered = jax.jit(in_program_order(f))
    self.assertEqual(list(testing.races(ordered.lower(*args))), [])
    testing.reset_slots()
    _, after = ordered(*args)
    self.assertEqual(float(after), 5.0)


if __name__ == "__main__":
  absltest.main()
