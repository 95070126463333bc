"""A native call that returns only a JAX token (issue 70): a binding's own
primitive whose lowering's custom call returns a ``!stablehlo.token``, as
older mpi4jax's sends did. ``in_program_order`` entangles the later calls
after that token (``entangle`` takes a token witness as an operand of its
custom call), where it used to fail on the token; a call that returns
nothing at all is still warned about, and the warning says to return a
token or an array.

Each ordering test has its control: the plain program, where the race check
reports the pair and neither call comes before the other.
"""

import functools
import inspect
import time
import warnings

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.extend import core as jex_core
from jax.extend.mlir.dialects import stablehlo
from jax.interpreters import mlir

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax._src import jax_compat, native
from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax._src.targets import in_code
from entangle_jax.testing import example_store
from tests import test_util

SEND = "entangle_jax_test_token_send"
RECV = "entangle_jax_test_token_recv"
QUIET = "entangle_jax_test_token_quiet"


@functools.cache
def registered() -> None:
  """The test targets, with entangle's no-op handler (once): the module
  compiles and runs, and only its order is looked at."""
  handler = native.load().registrations()["entangle"]
  for target in (SEND, RECV, QUIET):
    jax.ffi.register_ffi_target(target, handler, platform="cpu")


# The abstract value JAX gives a token (`jax.lax.create_token()`'s): JAX
# tells tokens from arrays by this very object.
# Traced, not made: an eager token would start a JAX backend at import.
TOKEN = jax.make_jaxpr(jax.lax.create_token)().out_avals[0]

# send(x) -> token: the custom call returns only a token, as a binding
# written with jax.ffi's lowering and a token result type does.
send_p = jex_core.Primitive("token_result_test_send")
send_p.def_abstract_eval(lambda x: TOKEN)
mlir.register_lowering(send_p, jax.ffi.ffi_lowering(SEND, has_side_effect=True))

# send_on(x, token) -> token: takes and returns a token, as older mpi4jax's
# bindings did.
send_on_p = jex_core.Primitive("token_result_test_send_on")
send_on_p.def_abstract_eval(lambda x, token: TOKEN)
mlir.register_lowering(
  send_on_p, jax.ffi.ffi_lowering(SEND, has_side_effect=True)
)


# quiet(x) -> (): the control for a call that returns truly nothing.
class _Quiet(jax_compat.Effect):
  """quiet's effect, unordered: JAX keeps the call, and orders it not."""

  __str__ = lambda self: "TokenResultTestQuiet"  # noqa: E731


jax_compat.lowerable_effects.add_type(_Quiet)
quiet_p = jex_core.Primitive("token_result_test_quiet")
quiet_p.multiple_results = True
quiet_p.def_effectful_abstract_eval(lambda x: ([], {_Quiet()}))
mlir.register_lowering(
  quiet_p, jax.ffi.ffi_lowering(QUIET, has_side_effect=True)
)


# host_send(x) -> token, for run time: a host callback (a custom call
# XLA:CPU runs) that returns only its token, as a send would, and logs when
# it ended on the example store's counter.
ENDED: list[int] = []
_RETURNS_TOKEN = (
  "returns_token" in inspect.signature(mlir.emit_python_callback).parameters
)


def _slow_send(x):
  time.sleep(0.005)  # Long enough for an unordered write to run first.
  ENDED.append(example_store.next_sequence_number())
  return ()


def _host_send_lowering(ctx, x):
  token = stablehlo.CreateTokenOp().result
  _, token, _ = mlir.emit_python_callback(
    ctx,
    _slow_send,
    token,
    [x],
    ctx.avals_in,
    [],
    has_side_effect=True,
    returns_token=True,
  )
  return [token]


host_send_p = jex_core.Primitive("token_result_test_host_send")
host_send_p.def_abstract_eval(lambda x: TOKEN)
mlir.register_lowering(host_send_p, _host_send_lowering, platform="cpu")


def recv(x):
  return jax.ffi.ffi_call(
    RECV, jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True
  )(x)


def send_then_recv(x):
  """A send whose only result is a token, then a receive that shares no
  data with it (its operand is computed, so XLA may schedule it first)."""
  with jax.named_scope("send"):
    token = send_p.bind(x)
  with jax.named_scope("recv"):
    y = recv(jnp.sin(x))
  return y, token


def quiet_then_recv(x):
  with jax.named_scope("send"):
    quiet_p.bind(x)
  with jax.named_scope("recv"):
    return recv(jnp.sin(x))


def compiled_quietly(fn):
  registered()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = jax.jit(fn).lower(jnp.arange(4.0)).compile()
  return compiled, [str(w.message) for w in caught]


def race_pairs(compiled) -> set[frozenset[str]]:
  """The races of `compiled` as pairs of targets."""
  return {
    frozenset((r.first.target, r.second.target))
    for r in testing.races(compiled)
  }


class TokenResultTest(absltest.TestCase):
  def test_the_later_call_waits_for_the_token(self):
    fixed, messages = compiled_quietly(in_program_order(send_then_recv))
    self.assertEqual(messages, [])
    self.assertEqual(testing.races(fixed), [])
    self.assertTrue(testing.happens_before(fixed, "send", "recv"))
    # Through one entangle that takes the send's token as a witness.
    self.assertEqual(
      test_util.custom_calls(testing.module_text(fixed), ENTANGLE_TARGET), 1
    )
    # Control: the plain program leaves the pair unordered.
    plain, messages = compiled_quietly(send_then_recv)
    self.assertEqual(messages, [])
    self.assertEqual(race_pairs(plain), {frozenset((SEND, RECV))})
    self.assertFalse(testing.happens_before(plain, "send", "recv"))

  def test_the_entangle_takes_the_token_itself(self):
    jaxpr = jax.make_jaxpr(in_program_order(send_then_recv))(jnp.arange(4.0))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "entangle"]
    (send,) = [e for e in jaxpr.eqns if e.primitive.name == send_p.name]
    witnesses = eqn.invars[eqn.params["num_payload"] :]
    self.assertEqual(witnesses, send.outvars)
    self.assertTrue(jax_compat.is_token_aval(witnesses[0].aval))

  def test_the_program_runs_and_returns_its_values(self):
    registered()
    x = jnp.arange(4.0)
    y, token = jax.jit(in_program_order(send_then_recv))(x)
    # The no-op handler leaves its result as XLA allocated it; only the
    # token's type is checked here, and that the program ran.
    self.assertEqual(y.shape, x.shape)
    self.assertTrue(jax_compat.is_token(token))

  def test_a_call_that_returns_nothing_is_still_warned_about(self):
    fixed, messages = compiled_quietly(in_program_order(quiet_then_recv))
    (message,) = [m for m in messages if "returns no array" in m]
    self.assertIn(QUIET, message)
    self.assertIn("token", message)  # What to do: return a token (or array).
    self.assertEqual(
      test_util.custom_calls(testing.module_text(fixed), ENTANGLE_TARGET), 0
    )
    # Control: the token-returning send in its place is not warned about.
    _, messages = compiled_quietly(in_program_order(send_then_recv))
    self.assertEqual(messages, [])

  @absltest.skipUnless(_RETURNS_TOKEN, "jax 0.7 or newer: a callback's token")
  def test_at_run_time_the_write_waits_for_the_token_only_call(self):
    def program(slot, x):
      # The send's operand takes a while to compute, so that XLA:CPU runs
      # the independent write first when nothing orders it.
      m = jnp.full((256, 256), x)
      for _ in range(4):
        m = jnp.tanh(m @ m)
      with jax.named_scope("send"):
        token = host_send_p.bind(m[0, 0])
      with jax.named_scope("write"):
        written = testing.write_slot(slot, jnp.sin(x))
      return written, token

    args = (jnp.int32(5), jnp.float32(1.0))

    def early_writes(fn) -> int:
      """Runs in which the write began before the send had ended."""
      early = 0
      for _ in range(5):
        testing.reset_slots()
        del ENDED[:]
        jax.block_until_ready(fn(*args))
        jax.effects_barrier()
        (write,) = testing.call_log()
        (ended,) = ENDED
        early += not ended < write.start
      return early

    fixed = jax.jit(in_program_order(program))
    self.assertTrue(
      testing.happens_before(fixed.lower(*args).compile(), "send", "write")
    )
    self.assertEqual(early_writes(fixed), 0)
    # Control: the plain program leaves the pair unordered, and the write
    # runs first.
    plain = jax.jit(program)
    self.assertFalse(
      testing.happens_before(plain.lower(*args).compile(), "send", "write")
    )
    self.assertGreater(early_writes(plain), 0)

  def test_the_race_report_says_to_wait_for_the_token(self):
    # Declared (so that the report gives the order fix, not "declare it"),
    # the token-only send is one the later call can wait for: the fix says
    # to entangle with its result, and names in_program_order; a call that
    # returns nothing at all is the control.
    for target in (SEND, RECV, QUIET):
      entangle_jax.declare_target(target, mode="write")
      self.addCleanup(in_code.forget, target)
    plain, _ = compiled_quietly(send_then_recv)
    text = testing.format_races(testing.races(plain))
    self.assertNotIn("returns no array", text)
    self.assertIn("entangle(x, r)", text)
    self.assertIn("in_program_order", text)
    quiet, _ = compiled_quietly(quiet_then_recv)
    text = testing.format_races(testing.races(quiet))
    self.assertIn("returns no array", text)

  def test_a_call_that_takes_and_returns_a_token(self):
    def program(x):
      with jax.named_scope("send"):
        token = send_on_p.bind(x, jax.lax.create_token())
      with jax.named_scope("recv"):
        y = recv(jnp.sin(x))
      return y, token

    fixed, messages = compiled_quietly(in_program_order(program))
    self.assertEqual(messages, [])
    self.assertTrue(testing.happens_before(fixed, "send", "recv"))
    # Control.
    plain, _ = compiled_quietly(program)
    self.assertFalse(testing.happens_before(plain, "send", "recv"))

  def test_a_token_only_send_in_a_loop_body(self):
    # The body's token is its order value's witness; it leaves the body as
    # an int32 scalar entangled after it (a loop carries no token).
    def program(x):
      def body(carry):
        with jax.named_scope("send"):
          send_p.bind(carry[1])
        return carry[0] + 1, carry[1] + 1

      carry = jax.lax.while_loop(lambda c: c[0] < 3, body, (0, x))
      with jax.named_scope("recv"):
        return recv(jnp.sin(x)), carry

    fixed, messages = compiled_quietly(in_program_order(program))
    self.assertEqual(messages, [])
    self.assertEqual(testing.races(fixed), [])
    self.assertTrue(testing.happens_before(fixed, "send", "recv"))
    # Control: the plain program leaves the pair racing (jax 0.10), or
    # drops the send, whose token nothing uses (jax 0.12 removes it from
    # the loop body too); either way nothing orders it before the receive.
    plain, _ = compiled_quietly(program)
    if SEND in testing.module_text(plain):
      self.assertEqual(race_pairs(plain), {frozenset((SEND, RECV))})

  def test_a_token_only_send_in_a_branch_and_a_scan(self):
    # JAX drops these sends from the plain program (their tokens are
    # unused and the primitive declares no effect), so the plain program
    # has no pair to race; the transform keeps them, ordered before the
    # receive.
    def in_cond(x):
      def send(x):
        with jax.named_scope("send"):
          send_p.bind(x)
        return x + 1

      y = jax.lax.cond(x[0] > 0, send, lambda x: x - 1, x)
      with jax.named_scope("recv"):
        return recv(jnp.sin(y))

    def in_scan(x):
      def body(c, _):
        with jax.named_scope("send"):
          send_p.bind(c)
        return c + 1, None

      c, _ = jax.lax.scan(body, x, None, length=3)
      with jax.named_scope("recv"):
        return recv(jnp.sin(x)), c

    for program in (in_cond, in_scan):
      with self.subTest(program.__name__):
        fixed, messages = compiled_quietly(in_program_order(program))
        self.assertEqual(messages, [])
        self.assertEqual(testing.races(fixed), [])
        self.assertTrue(testing.happens_before(fixed, "send", "recv"))
        plain, _ = compiled_quietly(program)
        self.assertNotIn(SEND, testing.module_text(plain))
        self.assertIn(SEND, testing.module_text(fixed))

  def test_a_chain_of_token_only_sends(self):
    def sends(x):
      tokens = []
      for k in range(3):
        with jax.named_scope(f"send{k}"):
          tokens.append(send_p.bind(x + k))
      return tokens

    fixed, messages = compiled_quietly(in_program_order(sends))
    self.assertEqual(messages, [])
    self.assertEqual(testing.races(fixed), [])
    self.assertTrue(testing.happens_before(fixed, "send0", "send1"))
    self.assertTrue(testing.happens_before(fixed, "send1", "send2"))
    # Control: unordered without the transform.
    plain, _ = compiled_quietly(sends)
    self.assertNotEqual(testing.races(plain), [])


if __name__ == "__main__":
  absltest.main()
