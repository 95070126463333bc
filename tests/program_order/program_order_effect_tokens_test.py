"""An ordered effect is an order: JAX threads one token per ordered effect
through the calls that have it, and XLA runs them in program order. So
`in_program_order` adds no ``entangle`` between such calls (JAX's
``io_callback(ordered=True)``, a binding's primitive with an ordered effect
as mpi4jax's), and does not warn that a call returning no array cannot be
waited for when the token is what orders the next one.

Each test has its control: the same calls without the ordered effect race
in the plain program and take entangles (and warn) under the transform.
"""

import importlib
import importlib.util
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback
from jax.extend import core as jex_core
from jax.interpreters import mlir

from entangle_jax import in_program_order, testing
from entangle_jax._src import jax_compat
from tests import test_util

ENTANGLE = "entangle_jax_entangle"
CALLS = 20


def compiled(f, *args):
  return jax.jit(f).lower(*args).compile()


def entangles(c) -> int:
  return test_util.custom_calls(testing.module_text(c), ENTANGLE)


class _Ordered(jax_compat.Effect):
  """A binding's own effect, ordered as mpi4jax's is."""

  __str__ = lambda self: "TokenChainTestOrdered"  # noqa: E731


class _Unordered(jax_compat.Effect):
  """The same binding's effect, unordered: the control."""

  __str__ = lambda self: "TokenChainTestUnordered"  # noqa: E731


ORDERED, UNORDERED = _Ordered(), _Unordered()
jax_compat.ordered_effects.add_type(_Ordered)
jax_compat.lowerable_effects.add_type(_Ordered)
jax_compat.lowerable_effects.add_type(_Unordered)

LOG: list[int] = []
_RETURNS_TOKEN = (
  "returns_token" in inspect.signature(mlir.emit_python_callback).parameters
)


def _host_log(x):
  LOG.append(int(np.asarray(x)))
  return ()


def _make(name: str, effect):
  """A primitive ``send(x)`` that returns no array (as mpi4jax's barrier
  and sends), lowered to a host callback that logs `x`; with `effect`,
  whose token it threads where it is ordered."""
  p = jex_core.Primitive(name)
  p.multiple_results = True
  p.def_effectful_abstract_eval(lambda x: ([], {effect}))

  def lowering(ctx, x):
    ordered = effect is ORDERED
    token = ctx.tokens_in.get(effect) if ordered else None
    # `returns_token` is jax 0.7's and later (earlier: no token, none back).
    kwargs = {"returns_token": ordered} if _RETURNS_TOKEN else {}
    _, token, _ = mlir.emit_python_callback(
      ctx,
      _host_log,
      token,
      [x],
      ctx.avals_in,
      [],
      has_side_effect=True,
      **kwargs,
    )
    if ordered:
      ctx.set_tokens_out(mlir.TokenSet({effect: token}))
    return []

  mlir.register_lowering(p, lowering, platform="cpu")
  return p


ordered_send_p = _make("token_chain_test_ordered_send", ORDERED)
unordered_send_p = _make("token_chain_test_unordered_send", UNORDERED)


def chain(p):
  def f(x):
    for k in range(CALLS):
      p.bind(x + k)
    return x + 1

  return f


def transformed(f, x):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    c = compiled(in_program_order(f), x)
  return c, [str(w.message) for w in caught]


class EffectTokenTest(absltest.TestCase):
  def test_a_binding_primitive_with_an_ordered_effect(self):
    x = jnp.int32(0)
    jaxpr = jax.make_jaxpr(chain(ordered_send_p))(x)
    self.assertTrue(
      jax_compat.ordered_effects_of(jaxpr.jaxpr.eqns[1]), jaxpr.jaxpr.eqns[1]
    )
    # The plain program: the token orders every pair.
    self.assertEqual(testing.races(compiled(chain(ordered_send_p), x)), [])
    fixed, messages = transformed(chain(ordered_send_p), x)
    self.assertEqual(entangles(fixed), 0)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(messages, [])
    del LOG[:]
    jax.block_until_ready(fixed(x))
    jax.effects_barrier()
    self.assertEqual(LOG, list(range(CALLS)))

  def test_the_control_without_the_ordered_effect(self):
    x = jnp.int32(0)
    racy = compiled(chain(unordered_send_p), x)
    self.assertLen(testing.races(racy), CALLS * (CALLS - 1) // 2)
    fixed, messages = transformed(chain(unordered_send_p), x)
    # Nothing can wait for a call that returns no array: entangles cannot
    # order these, and the transform says so.
    self.assertTrue(any("returns no array" in m for m in messages), messages)
    self.assertNotEmpty(testing.races(fixed))

  def test_ordered_io_callbacks(self):
    def f(x, ordered):
      outs = []
      for k in range(CALLS):
        outs.append(
          io_callback(
            lambda v: np.int32(v),
            jax.ShapeDtypeStruct((), jnp.int32),
            x + k,
            ordered=ordered,
          )
        )
      return jnp.stack(outs)

    x = jnp.int32(0)
    plain = compiled(lambda v: f(v, True), x)
    self.assertEqual(testing.races(plain), [])
    fixed, messages = transformed(lambda v: f(v, True), x)
    self.assertEqual(entangles(fixed), 0)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(messages, [])
    self.assertEqual(fixed(x).tolist(), list(range(CALLS)))
    # The control: unordered, they race, and the transform entangles.
    self.assertNotEmpty(testing.races(compiled(lambda v: f(v, False), x)))
    fixed, _ = transformed(lambda v: f(v, False), x)
    self.assertEqual(entangles(fixed), CALLS - 1)
    self.assertEqual(testing.races(fixed), [])

  @absltest.skipUnless(
    importlib.util.find_spec("mpi4jax") is not None,
    "mpi4jax is not installed: it builds only against an MPI library "
    "(Debian's Open MPI, with mpicc), which this machine lacks",
  )
  def test_an_mpi4jax_chain(self):
    mpi4jax = importlib.import_module("mpi4jax")

    def f(x):
      for _ in range(CALLS):
        x = mpi4jax.bcast(x, root=0)
        mpi4jax.barrier()
      return x

    x = jnp.ones(3)
    self.assertEqual(testing.races(compiled(f, x)), [])
    fixed, messages = transformed(f, x)
    self.assertEqual(entangles(fixed), 0)
    self.assertEqual(messages, [])


if __name__ == "__main__":
  absltest.main()
