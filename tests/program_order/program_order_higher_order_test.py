"""`in_program_order` on a binding's own higher-order primitive: a
`Primitive` that takes a sub-program (a ``ClosedJaxpr`` parameter) and whose
own lowering makes a native call before or after running it, or whose
sub-program makes native calls. The equation is ordered as one call: every
call in it, the lowering's own and the body's, after the earlier calls it
conflicts with, and the later calls after all of them. The body's calls
among themselves are ordered by the body's own transform.

Every ordering test has its control: the same program without the
transform races (``testing.races``), and reads wrong at run time where
this machine runs its calls at once.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.core import ShapedArray
from jax.extend import core as jex_core
from jax.interpreters import mlir

from entangle_jax import in_program_order, testing
from entangle_jax._src.program_order import natives
from entangle_jax._src.targets import sources
from entangle_jax.testing import example_store
from tests import test_util

ENTANGLE = "entangle_jax_entangle"
RUNS = 30
HAZARDS = 12


def compiled(f, *args):
  return jax.jit(f).lower(*args).compile()


def entangles(c) -> int:
  return test_util.custom_calls(testing.module_text(c), ENTANGLE)


def _lower_body(ctx, body, avals_in, avals_out, args):
  inner = ctx.replace(avals_in=avals_in, avals_out=avals_out)
  fun = jex_core.jaxpr_as_fun(body)
  return mlir.lower_fun(fun, multiple_results=True)(inner, *args)


# Its own read of the slot `token` names, then its body on `xs`:
# ``(read(token), *body(*xs))``.
read_first_p = jex_core.Primitive("program_order_higher_order_read_first")
read_first_p.multiple_results = True
read_first_p.def_abstract_eval(
  lambda token, *xs, body, delay_us: [
    ShapedArray(token.shape, jnp.float32),
    *body.out_avals,
  ]
)


def _read_first_lowering(ctx, token, *xs, body, delay_us):
  read = jax.ffi.ffi_lowering(example_store.READ_SLOT_TARGET)
  (value,) = read(
    ctx.replace(avals_in=ctx.avals_in[:1], avals_out=ctx.avals_out[:1]),
    token,
    delay_us=np.int64(delay_us),
  )
  outs = _lower_body(ctx, body, ctx.avals_in[1:], ctx.avals_out[1:], xs)
  return [value, *outs]


mlir.register_lowering(read_first_p, _read_first_lowering, platform="cpu")

# Its body on `xs` first, then its own write of `value` to `slot`:
# ``(*body(*xs), write(slot, value))``.
write_last_p = jex_core.Primitive("program_order_higher_order_write_last")
write_last_p.multiple_results = True
write_last_p.def_abstract_eval(
  lambda slot, value, *xs, body: [
    *body.out_avals,
    ShapedArray(slot.shape, jnp.int32),
  ]
)


def _write_last_lowering(ctx, slot, value, *xs, body):
  outs = _lower_body(ctx, body, ctx.avals_in[2:], ctx.avals_out[:-1], xs)
  write = jax.ffi.ffi_lowering(
    example_store.WRITE_SLOT_TARGET, has_side_effect=True
  )
  (token,) = write(
    ctx.replace(avals_in=ctx.avals_in[:2], avals_out=ctx.avals_out[-1:]),
    slot,
    value,
  )
  return [*outs, token]


mlir.register_lowering(write_last_p, _write_last_lowering, platform="cpu")

# No native call of its own: it runs its body, whose calls are native.
run_body_p = jex_core.Primitive("program_order_higher_order_run_body")
run_body_p.multiple_results = True
run_body_p.def_abstract_eval(lambda *xs, body: body.out_avals)


def _run_body_lowering(ctx, *xs, body):
  return _lower_body(ctx, body, ctx.avals_in, ctx.avals_out, xs)


mlir.register_lowering(run_body_p, _run_body_lowering, platform="cpu")


def _pure_body(x):
  return jax.make_jaxpr(lambda v: (jnp.sin(v),))(x)


def read_first(token, x, delay_us=1000):
  return read_first_p.bind(
    jnp.asarray(token, jnp.int32), x, body=_pure_body(x), delay_us=delay_us
  )


def write_last(slot, value, x):
  return write_last_p.bind(
    jnp.asarray(slot, jnp.int32),
    jnp.asarray(value, jnp.float32),
    x,
    body=_pure_body(x),
  )


def run_body(fn, *xs):
  body = jax.make_jaxpr(fn)(*xs)
  return run_body_p.bind(*xs, body=body)


def read_before_body(big):
  """Each slot written, read by the primitive's own read before its body,
  then written again: nothing orders the second write after the read."""
  reads, last = [], []
  for i in range(HAZARDS):
    token = testing.write_slot(i + 2, 1.0)
    value, _ = read_first(token, big[:4])
    reads.append(value)
    last.append(testing.write_slot(i + 2, 2.0))
  return jnp.stack(reads), jnp.sin(big).sum(), jnp.stack(last)


def write_after_body(big):
  """Each slot written and read (slowly), then written again by the
  primitive's own write after its body: nothing orders that write after
  the read."""
  reads, last = [], []
  for i in range(HAZARDS):
    token = testing.write_slot(i + 22, 1.0)
    reads.append(testing.read_slot(token, delay_us=1000))
    _, done = write_last(i + 22, 2.0, big[:4])
    last.append(done)
  return jnp.stack(reads), jnp.sin(big).sum(), jnp.stack(last)


def body_makes_the_calls(big):
  """The primitive's body reads (slowly) and writes each slot again: its
  read after the write outside, its write after its own read, and the
  write after the primitive after both."""

  def body(tokens):
    values = [testing.read_slot(t, delay_us=1000) for t in tokens]
    again = [testing.write_slot(t, 2.0) for t in tokens]
    return (*values, *again)

  tokens = [testing.write_slot(i + 42, 1.0) for i in range(HAZARDS)]
  outs = run_body(lambda *t: body(t), *tokens)
  reads = outs[:HAZARDS]
  last = [testing.write_slot(i + 42, 3.0) for i in range(HAZARDS)]
  return jnp.stack(reads), jnp.sin(big).sum(), jnp.stack(last)


def wrong_runs(fn, big) -> int:
  """Of `RUNS` runs, how many read a value other than the first write's."""
  run = jax.jit(fn)
  return sum(bool(np.any(np.asarray(run(big)[0]) != 1.0)) for _ in range(RUNS))


class HigherOrderPrimitiveTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.big = jnp.ones(1 << 16)

  def check(self, program, races_plain: int, entangle_count: int):
    racy = compiled(program, self.big)
    # The control: the plain program's pairs.
    self.assertLen(testing.races(racy), races_plain)
    fixed = compiled(in_program_order(program), self.big)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), entangle_count)
    self.assertEqual(wrong_runs(in_program_order(program), self.big), 0)
    plain = wrong_runs(program, self.big)
    if not plain:
      self.skipTest("this XLA happened to run every read first, unordered")
    self.assertGreater(plain, 0)

  def test_its_own_call_is_found_with_a_body(self):
    x = jnp.ones(4)
    jaxpr = jax.make_jaxpr(lambda t: read_first(t, x))(jnp.int32(0))
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive is read_first_p]
    self.assertTrue(any(True for _ in natives.sub_jaxprs(eqn)))
    found = natives.native_call(eqn, sources.current())
    assert found is not None
    self.assertEqual(found.label, example_store.READ_SLOT_TARGET)
    self.assertEqual(found.objects, (0,))

  def test_a_read_before_its_body(self):
    self.check(read_before_body, 2 * HAZARDS, HAZARDS)

  def test_a_write_after_its_body(self):
    self.check(write_after_body, 2 * HAZARDS, HAZARDS)

  def test_calls_in_its_body(self):
    racy = compiled(body_makes_the_calls, self.big)
    self.assertNotEmpty(testing.races(racy))  # The control.
    fixed = compiled(in_program_order(body_makes_the_calls), self.big)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(
      wrong_runs(in_program_order(body_makes_the_calls), self.big), 0
    )
    if not wrong_runs(body_makes_the_calls, self.big):
      self.skipTest("this XLA happened to run every read first, unordered")


if __name__ == "__main__":
  absltest.main()
