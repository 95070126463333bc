"""Ops that JAX derives from a call keep the call's access, except the
backward pass: a record under ``transpose(...)`` is the forward call's,
copied, and gives an op of the backward rule nothing."""

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized

from entangle_jax import Resource, entangle, testing
from entangle_jax._src import access_marker
from tests.test_util import READ, WRITE, compiled


@jax.custom_jvp
def _read_custom_jvp(token, w):
  return testing.read_slot(token) * w


@_read_custom_jvp.defjvp
def _read_custom_jvp_rule(primals, tangents):
  token, w = primals
  _, dw = tangents
  value = testing.read_slot(token)
  return value * w, value * dw


def _read_fwd(token, w):
  """The forward rule of the custom_vjp reads below: the read, and what the
  backward rule needs."""
  value = testing.read_slot(token)
  return value * w, (token, value)


@jax.custom_vjp
def _read_custom_vjp(token, w):
  return testing.read_slot(token) * w


def _read_custom_vjp_bwd(saved, g):
  _, value = saved
  return None, g * value


_read_custom_vjp.defvjp(_read_fwd, _read_custom_vjp_bwd)


def _plain(token, w):
  return testing.read_slot(token) * w


def _checkpointed(token, w):
  return jax.checkpoint(_plain)(token, w)


def _vmapped(token, w):
  tokens = jnp.stack([token, token])
  return jax.vmap(_plain, in_axes=(0, None))(tokens, w)[0]


# How each derived read is made, and whether it is differentiated.
FORWARD_CASES = (
  ("jvp", _plain, True),
  ("vmap", _vmapped, False),
  ("checkpoint", _checkpointed, True),
  ("custom_jvp", _read_custom_jvp, True),
  ("custom_vjp_forward", _read_custom_vjp, True),
)


def forward_program(read, differentiate: bool, inside: bool):
  """A read made by `read` inside ``Resource(slot, name="ps").read`` (or
  outside any Resource: the control), under ``grad`` when
  `differentiate`."""

  def loss(w, slot):
    if inside:
      res = Resource(slot, name="ps")
      return jnp.sum(res.read(read, w))
    return jnp.sum(read(slot, w))

  fn = jax.grad(loss) if differentiate else loss
  return compiled(fn, jnp.float32(2.0), jnp.int32(0))


class ForwardDerivedOpsTest(parameterized.TestCase):
  @parameterized.named_parameters(*FORWARD_CASES)
  def test_a_derived_forward_call_keeps_its_access(self, read, differentiate):
    c = forward_program(read, differentiate, inside=True)
    analysis = testing.OrderAnalysis(c)
    ops = analysis.select_ops(READ)
    self.assertNotEmpty(ops)
    for op in ops:
      self.assertFalse(op.backward)
      self.assertEqual(
        [(a.resource, a.mode) for a in op.accesses], [("ps", "read")]
      )

  @parameterized.named_parameters(*FORWARD_CASES)
  def test_control_outside_a_resource_it_has_none(self, read, differentiate):
    c = forward_program(read, differentiate, inside=False)
    for op in testing.OrderAnalysis(c).select_ops(READ):
      self.assertEqual([a.resource for a in op.accesses], [None])


class RecordsTest(absltest.TestCase):
  """The rule on the op_names JAX writes (jax 0.6.2 to 0.12)."""

  def test_a_rematerialized_forward_call_is_the_forward_call(self):
    c = forward_program(_checkpointed, True, inside=True)
    (op,) = testing.OrderAnalysis(c).select_ops(READ)
    self.assertIn("rematted_computation", op.scope)
    self.assertIn("transpose(", op.scope)
    self.assertFalse(op.backward)
    name = (
      "jit(f)/transpose(jvp(entangle_jax:read:ps))/jvp(entangle_jax:read:ps)"
    )
    remat = access_marker.marks(
      name + "/checkpoint/rematted_computation/ffi_call"
    )
    self.assertEqual(
      [(a.resource, a.mode) for a in remat.accesses], [("ps", "read")]
    )
    # jax 0.6.2 writes the forward scopes only inside the transposed one.
    older = access_marker.marks(
      "jit(f)/transpose(jvp(entangle_jax:read:ps))/checkpoint/"
      "rematted_computation/ffi_call"
    )
    self.assertEqual(
      [(a.resource, a.mode) for a in older.accesses], [("ps", "read")]
    )
    # Control: without the recomputation scope, the records are copies.
    copied = access_marker.marks(name + "/ffi_call")
    self.assertEqual(copied.accesses, ())
    self.assertTrue(copied.backward)

  def test_only_records_before_the_transposed_component_are_own(self):
    name = (
      "jit(f)/entangle_jax:write:a/transpose(jvp(outer))/entangle_jax:read:b/x"
    )
    found = access_marker.marks(name)
    self.assertEqual([a.resource for a in found.accesses], ["a"])
    self.assertEqual([a.resource for a in found.inherited], ["b"])
    plain = access_marker.marks(
      name.replace("transpose(jvp(outer))", "jvp(outer)")
    )
    self.assertEqual([a.resource for a in plain.accesses], ["a", "b"])


@jax.custom_vjp
def pull(token, w):
  """A parameter server's pull: reads the slot; its backward rule pushes
  the gradient into the slot (a write outside any Resource)."""
  return testing.read_slot(token) * w


def _pull_bwd(saved, g):
  token, value = saved
  testing.write_slot(token, g)  # Not ordered after the forward read.
  return None, g * value


pull.defvjp(_read_fwd, _pull_bwd)


@jax.custom_vjp
def pull_ordered(token, w):
  return testing.read_slot(token) * w


def _pull_ordered_bwd(saved, g):
  token, value = saved
  testing.write_slot(entangle(token, value), g)  # After the forward read.
  return None, g * value


pull_ordered.defvjp(_read_fwd, _pull_ordered_bwd)


def step(puller):
  def loss(w, slot):
    res = Resource(slot, name="ps")
    return jnp.sum(res.read(puller, w))

  return compiled(jax.grad(loss), jnp.float32(7.0), jnp.int32(0))


class BackwardPassTest(absltest.TestCase):
  def test_a_write_in_a_backward_rule_races_with_the_forward_read(self):
    c = step(pull)
    analysis = testing.OrderAnalysis(c)
    (write,) = analysis.select_ops(WRITE)
    self.assertTrue(write.backward)
    (access,) = write.accesses
    self.assertEqual((access.resource, access.mode), (None, "write"))
    self.assertIn("transpose(jvp(", write.user_scope)
    self.assertIn("[backward pass]", write.label())
    found = testing.races(c)
    self.assertLen(found, 1)
    self.assertEqual(
      {found[0].first.target, found[0].second.target}, {READ, WRITE}
    )
    self.assertIn("backward", testing.format_races(found))

  def test_control_the_ordered_backward_write_is_no_race(self):
    self.assertEqual(testing.races(step(pull_ordered)), [])

  def test_a_backward_read_under_a_write_is_no_write_of_that_resource(self):
    @jax.custom_vjp
    def push(token, w):
      return testing.write_slot(token, w), w

    def push_fwd(token, w):
      return push(token, w), token

    def push_bwd(token, cotangents):
      _, g = cotangents
      return None, testing.read_slot(token) * g  # A read, backward.

    push.defvjp(push_fwd, push_bwd)

    def program(other_slot: int):
      def loss(w):
        res = Resource(jnp.int32(0), name="ps")
        y = res.write(push, w, has_aux=True)
        other = Resource(jnp.int32(other_slot), name="other")
        other.write(testing.write_slot, 3.0)
        return y + 0 * other.token

      return compiled(jax.grad(loss), jnp.float32(1.0))

    c = program(0)
    analysis = testing.OrderAnalysis(c)
    (read,) = analysis.select_ops(READ)
    self.assertTrue(read.backward)
    (access,) = read.accesses
    # Not a write of 'ps': the copied record gives it nothing, and its
    # target's declaration says what it does.
    self.assertEqual((access.resource, access.mode), (None, "read"))
    bare = testing.OrderAnalysis(c, declarations=testing.Declarations())
    ((undeclared,),) = [op.accesses for op in bare.select_ops(READ)]
    self.assertEqual((undeclared.resource, undeclared.mode), (None, "write"))
    # On slot 0: the backward read against the forward write (it reads the
    # token the forward pass was given, not the write's) and against the
    # other Resource's write; and those two writes, one slot under two
    # names.
    self.assertLen(testing.races(c), 3)
    # Control: the other Resource on slot 1 conflicts with neither.
    self.assertLen(testing.races(program(1)), 1)


if __name__ == "__main__":
  absltest.main()
