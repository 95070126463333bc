"""A JAX token as a witness: ``entangle(x, token)`` (issue 70).

The token is an operand of entangle's custom call, so XLA computes the
result after the token's producer (a native call that returns only a
token). The token gets no tangent and is never a payload.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.extend import core as jex_core
from jax.interpreters import mlir

from entangle_jax import entangle, testing
from entangle_jax._src import jax_compat, native
from entangle_jax._src.native import ENTANGLE_TARGET
from tests import test_util

SEND = "entangle_jax_test_token_witness_send"
RECV = "entangle_jax_test_token_witness_recv"


@functools.cache
def registered() -> None:
  """The test targets, with entangle's no-op handler (once)."""
  handler = native.load().registrations()["entangle"]
  for target in (SEND, RECV):
    jax.ffi.register_ffi_target(target, handler, platform="cpu")


# Traced, not made: an eager token would start a JAX backend at import.
TOKEN = jax.make_jaxpr(jax.lax.create_token)().out_avals[0]
send_p = jex_core.Primitive("token_witness_test_send")
send_p.def_abstract_eval(lambda x: TOKEN)
mlir.register_lowering(send_p, jax.ffi.ffi_lowering(SEND, has_side_effect=True))


def recv(x):
  return jax.ffi.ffi_call(
    RECV, jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True
  )(x)


def send_then_recv(witness: bool):
  def fn(x):
    with jax.named_scope("send"):
      token = send_p.bind(x)
    y = jnp.sin(x)
    if witness:
      y = entangle(y, token)
    with jax.named_scope("recv"):
      return recv(y), token

  return fn


def compiled(fn, *args):
  registered()
  return jax.jit(fn).lower(*args).compile()


class TokenWitnessTest(absltest.TestCase):
  def test_the_result_comes_after_the_tokens_producer(self):
    x = jnp.arange(4.0)
    fixed = compiled(send_then_recv(True), x)
    self.assertTrue(testing.happens_before(fixed, "send", "recv"))
    self.assertEqual(testing.races(fixed), [])
    # The token is an operand of the custom call, which XLA keeps.
    text = testing.module_text(fixed)
    self.assertEqual(test_util.custom_calls(text, ENTANGLE_TARGET), 1)
    (line,) = [
      line for line in text.splitlines() if f'"{ENTANGLE_TARGET}"' in line
    ]
    self.assertIn("token[]", line)
    # Control: without the witness, the pair races.
    plain = compiled(send_then_recv(False), x)
    self.assertFalse(testing.happens_before(plain, "send", "recv"))
    self.assertLen(testing.races(plain), 1)

  def test_values_with_a_token_witness(self):
    x = jnp.array([np.nan, -0.0, 1.5], jnp.float32)
    token = jax.lax.create_token()
    with self.subTest("eagerly"):
      np.testing.assert_array_equal(entangle(x, token), x)
    with self.subTest("jit"):
      np.testing.assert_array_equal(
        jax.jit(lambda x: entangle(x, jax.lax.create_token()))(x), x
      )
    with self.subTest("a token argument of jit"):
      np.testing.assert_array_equal(jax.jit(entangle)(x, token), x)
    with self.subTest("disable_jit"), jax.disable_jit():
      np.testing.assert_array_equal(entangle(x, token), x)
    with self.subTest("a tree with a token and an array"):
      got = entangle({"a": x}, (token, jnp.ones(2)))
      np.testing.assert_array_equal(got["a"], x)

  def test_vmap(self):
    xs = jnp.arange(6.0).reshape(2, 3)
    for fn in (
      jax.vmap(lambda x: entangle(x, jax.lax.create_token())),
      jax.jit(jax.vmap(lambda x: entangle(x, jax.lax.create_token()))),
    ):
      np.testing.assert_array_equal(fn(xs), xs)

  def test_a_token_witness_gets_no_tangent(self):
    x = jnp.arange(3.0)

    def f(x):
      return jnp.sum(entangle(x, jax.lax.create_token()) ** 2)

    np.testing.assert_allclose(jax.grad(f)(x), 2 * x)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), 2 * x)
    primal, tangent = jax.jvp(
      lambda x: entangle(x, jax.lax.create_token()), (x,), (jnp.ones(3),)
    )
    np.testing.assert_array_equal(primal, x)
    np.testing.assert_array_equal(tangent, jnp.ones(3))
    # The tangent is ordered after the token too, as after any witness.
    jaxpr = jax.make_jaxpr(
      lambda x: jax.jvp(
        lambda x: entangle(x, jax.lax.create_token()), (x,), (x,)
      )
    )(x)
    witnesses = [
      e.invars[e.params["num_payload"] :]
      for e in jaxpr.eqns
      if e.primitive.name == "entangle"
    ]
    self.assertLen(witnesses, 2)  # The primal's and the tangent's.
    for ws in witnesses:
      self.assertTrue(any(jax_compat.is_token_aval(w.aval) for w in ws))

  def test_a_token_payload_names_the_leaf(self):
    token = jax.lax.create_token()
    with self.assertRaisesRegex(TypeError, r"payload\['a'\] is a JAX token"):
      entangle({"a": token}, jnp.ones(2))
    with self.assertRaisesRegex(TypeError, r"payload is a JAX token"):
      jax.jit(lambda: entangle(jax.lax.create_token(), jnp.ones(2)))()
    # Control: the same token as a witness is taken.
    np.testing.assert_array_equal(entangle(jnp.ones(2), {"a": token}), 1.0)

  def test_a_witness_of_no_array_still_raises_beside_a_token_check(self):
    # A token is not "no array leaves": only None and the like raise.
    with self.assertRaisesRegex(TypeError, "have no array leaves"):
      entangle(jnp.ones(2), None)
    np.testing.assert_array_equal(
      entangle(jnp.ones(2), jax.lax.create_token()), 1.0
    )


if __name__ == "__main__":
  absltest.main()
