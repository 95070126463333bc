"""`in_program_order` finds native calls by what they lower to: a binding's
own primitive (klujax's, jax-finufft's, a `jax.extend` primitive with an FFI
lowering) is a native call when its lowering emits custom calls that are
not JAX's and XLA's own kernels. Host callbacks are known under the targets
the race check reads; ``pure_callback`` is ordered by neither.

Every ordering test has its control: the same program without the
transform races (``testing.races`` of its compiled module is not empty).
"""

import importlib
import importlib.util
import unittest.mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.core import ShapedArray
from jax.experimental import io_callback
from jax.extend import core as jex_core
from jax.interpreters import mlir

import entangle_jax
from entangle_jax import in_program_order, testing
from entangle_jax._src.program_order import lowered, natives
from entangle_jax._src.targets import in_code, names, sources
from entangle_jax._src.targets.declaration import TargetDeclaration
from entangle_jax.testing import example_store
from tests import test_util
from tests.program_order import program_order_programs as programs

ENTANGLE = "entangle_jax_entangle"


def compiled(f, *args):
  return jax.jit(f).lower(*args).compile()


def entangles(c) -> int:
  return test_util.custom_calls(testing.module_text(c), ENTANGLE)


# A binding's own primitives, lowered to the example store's FFI targets
# (declared: the write's object is operand 0, handed back as result 0; the
# read's object is operand 0). In the jaxpr they are `store_write` and
# `store_read`, not ffi_call.
write_p = jex_core.Primitive("program_order_natives_store_write")
read_p = jex_core.Primitive("program_order_natives_store_read")
write_p.def_abstract_eval(
  lambda slot, value, **_: ShapedArray(slot.shape, jnp.int32)
)
read_p.def_abstract_eval(
  lambda token, **_: ShapedArray(token.shape, jnp.float32)
)
mlir.register_lowering(
  write_p,
  jax.ffi.ffi_lowering(example_store.WRITE_SLOT_TARGET, has_side_effect=True),
  platform="cpu",
)
mlir.register_lowering(
  read_p, jax.ffi.ffi_lowering(example_store.READ_SLOT_TARGET), platform="cpu"
)


def store_write(slot, value, delay_us=0):
  return write_p.bind(
    jnp.asarray(slot, jnp.int32),
    jnp.asarray(value, jnp.float32),
    delay_us=np.int64(delay_us),
  )


def store_read(token, delay_us=0):
  return read_p.bind(jnp.asarray(token, jnp.int32), delay_us=np.int64(delay_us))


def primitive_hazards(big):
  """Twelve write-read-write hazards through the binding's primitives,
  beside a large array: XLA:CPU runs it concurrently. The second writes'
  tokens are results, so that jit keeps them (the primitive has no
  effect to keep it)."""
  reads, last = [], []
  for i in range(12):
    token = store_write(i + 50, 1.0)
    reads.append(store_read(token, delay_us=1000))
    last.append(store_write(i + 50, 2.0))
  return jnp.stack(reads), jnp.sin(big).sum(), jnp.stack(last)


def wrong_reads(fn, runs=5) -> list[int]:
  big = jnp.ones(1 << 16)
  return [int(np.sum(np.asarray(fn(big)[0]) != 1.0)) for _ in range(runs)]


# A write whose slot the lowering makes (a constant in the lowering, not an
# input): which object it writes cannot be read from its inputs.
fixed_slot_write_p = jex_core.Primitive("program_order_natives_fixed_write")
fixed_slot_write_p.def_abstract_eval(lambda value: ShapedArray((), jnp.int32))


def _fixed_slot_lowering(ctx, value):
  slot = mlir.ir_constant(np.int32(62))
  rule = jax.ffi.ffi_lowering(
    example_store.WRITE_SLOT_TARGET, has_side_effect=True
  )
  inner = ctx.replace(avals_in=[ShapedArray((), jnp.int32), *ctx.avals_in])
  return rule(inner, slot, value)


mlir.register_lowering(fixed_slot_write_p, _fixed_slot_lowering, platform="cpu")

# A write of no operand at all: nothing to entangle it by.
nullary_write_p = jex_core.Primitive("program_order_natives_nullary_write")
nullary_write_p.def_abstract_eval(lambda: ShapedArray((), jnp.int32))


def _nullary_lowering(ctx):
  rule = jax.ffi.ffi_lowering(
    example_store.WRITE_SLOT_TARGET, has_side_effect=True
  )
  inner = ctx.replace(
    avals_in=[
      ShapedArray((), jnp.int32),
      ShapedArray((), jnp.float32),
    ]
  )
  return rule(
    inner, mlir.ir_constant(np.int32(63)), mlir.ir_constant(np.float32(3.0))
  )


mlir.register_lowering(nullary_write_p, _nullary_lowering, platform="cpu")

# A primitive with no lowering rule here (a binding that registers its
# lowering only where it runs): whether it makes a native call cannot be
# told.
unknown_p = jex_core.Primitive("program_order_natives_unknown")
unknown_p.def_abstract_eval(lambda x: x)


class LoweredTest(absltest.TestCase):
  def test_a_binding_primitive_is_read_from_its_lowering(self):
    jaxpr = jax.make_jaxpr(lambda s, v: store_write(s, v))(
      jnp.int32(0), jnp.float32(1)
    )
    (eqn,) = jaxpr.jaxpr.eqns
    self.assertEqual(eqn.primitive.name, write_p.name)
    (call,) = lowered.lower(eqn).calls
    self.assertEqual(call.target, example_store.WRITE_SLOT_TARGET)
    self.assertTrue(call.side_effect)
    self.assertEqual(call.operands, (0, 1))
    self.assertEqual(call.results, ((0,),))
    found = natives.native_call(eqn, sources.current())
    assert found is not None
    self.assertEqual(found.objects, (0,))
    self.assertEqual(found.returns, ((0,),))
    self.assertEqual([p.mode for p in found.parts], ["write"])

  def test_jax_primitives_are_never_lowered_to_look(self):
    jaxpr = jax.make_jaxpr(lambda x: jnp.linalg.inv(jnp.sin(x)))(jnp.eye(3))
    decls = sources.current()
    for eqn in natives.all_eqns(jaxpr.jaxpr):
      self.assertIsNone(natives.native_call(eqn, decls), eqn.primitive.name)
      if not any(natives.sub_jaxprs(eqn)):
        self.assertTrue(lowered.is_jax_primitive(eqn.primitive), eqn)


class PrimitiveOrderTest(absltest.TestCase):
  def test_write_read_write_through_a_binding_primitive(self):
    big = jnp.ones(1 << 16)
    racy = compiled(primitive_hazards, big)
    # The control: each read against its second write, and each second
    # write against its first (the first write's result is the read's
    # only input, not the second write's).
    self.assertLen(testing.races(racy), 24)
    fixed = compiled(in_program_order(primitive_hazards), big)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), 12)
    self.assertEqual(
      wrong_reads(jax.jit(in_program_order(primitive_hazards))), [0] * 5
    )
    if not any(wrong_reads(jax.jit(primitive_hazards))):
      self.skipTest("this XLA happened to run every read first, unordered")

  def test_an_object_made_in_the_lowering_orders_against_every_call(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      x = testing.read_slot(token)
      done = fixed_slot_write_p.bind(jnp.float32(2.0))  # Slot 62, unseen.
      return x, done

    racy = compiled(f, jnp.int32(3))
    self.assertLen(testing.races(racy), 2)  # The control.
    fixed = compiled(in_program_order(f), jnp.int32(3))
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), 1)

  def test_a_call_with_nothing_to_order_it_by_is_named(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      return testing.read_slot(token), nullary_write_p.bind()

    racy = compiled(f, jnp.int32(4))
    self.assertNotEmpty(testing.races(racy))
    # Only this test makes the primitive's call: the report is the one a
    # process that never ran the transform on it makes.
    before = testing.format_races(testing.races(racy))
    with self.assertRaisesRegex(
      NotImplementedError, "program_order_natives_nullary_write"
    ):
      jax.make_jaxpr(in_program_order(f))(jnp.int32(4))
    # The report reads the module only: the transform raising in this
    # process changes nothing in it (it once stopped offering the
    # transform here, so a report depended on what ran before it). The
    # module cannot tell the lowering's constant operand from a constant
    # input, so the transform is offered, and raises as above, naming it.
    after = testing.format_races(testing.races(racy))
    self.assertEqual(after, before)
    self.assertIn("in_program_order", after)

  def test_a_primitive_that_cannot_be_lowered_alone_is_named(self):
    def f(slot, x):
      token = testing.write_slot(slot, 1.0)
      return unknown_p.bind(x), token

    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      traced = jax.make_jaxpr(in_program_order(f))(jnp.int32(5), jnp.ones(3))
    messages = [str(w.message) for w in caught]
    self.assertTrue(
      any("program_order_natives_unknown" in m for m in messages), messages
    )
    self.assertTrue(all(w.filename == __file__ for w in caught))
    # Ordered as a call that may write anything: after the write.
    prims = [e.primitive.name for e in natives.all_eqns(traced.jaxpr)]
    self.assertEqual(prims.count("entangle"), 1)


class DeclaredOperandTest(absltest.TestCase):
  def test_a_declared_operand_the_call_lacks_is_an_error_in_both(self):
    # One access policy (issue 59): a declaration naming an operand the
    # call does not have is an error in the transform as in the race
    # check, where the transform had taken the call for one on anything.
    target = programs.UNDECLARED_WRITE
    write = jax.ffi.ffi_call(
      target, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
    )

    def f(s):
      return write(write(s, jnp.float32(1.0)), jnp.float32(2.0))

    s = jnp.int32(3)
    wrong = TargetDeclaration(target, "write", 3, source="test")
    with unittest.mock.patch.dict(in_code.DECLARED, {target: wrong}):
      with self.assertRaisesRegex(ValueError, "names operand 3, but %"):
        testing.races(compiled(f, s))
      with self.assertRaisesRegex(
        ValueError, f"names operand 3, but the call of `{target}` has 2"
      ):
        jax.jit(in_program_order(f)).lower(s)
    # Control: the operand it has.
    right = TargetDeclaration(target, "write", 0, (0,), source="test")
    with unittest.mock.patch.dict(in_code.DECLARED, {target: right}):
      self.assertEqual(testing.races(compiled(f, s)), [])
      jax.jit(in_program_order(f)).lower(s)


class CallbackTest(absltest.TestCase):
  def test_host_callbacks_under_the_target_the_check_reads(self):
    def f(x):
      a = io_callback(lambda v: v, jax.ShapeDtypeStruct((), jnp.float32), x)
      return io_callback(
        lambda v: v, jax.ShapeDtypeStruct((), jnp.float32), x + 1
      ), a

    racy = compiled(f, jnp.float32(1))
    (race,) = testing.races(racy)  # The control.
    target = race.first.instruction.target
    self.assertEqual(
      target, names.host_callback_target("io_callback", jax.default_backend())
    )
    self.assertTrue(names.is_host_callback(target))
    self.assertEqual(testing.races(compiled(in_program_order(f), 1.0)), [])
    # Declared read under the real target, by both halves: neither the
    # check nor the transform orders two reads.
    read = TargetDeclaration(target, "read")
    with unittest.mock.patch.dict(in_code.DECLARED, {target: read}):
      self.assertEqual(testing.races(racy), [])
      self.assertEqual(entangles(compiled(in_program_order(f), 1.0)), 0)
    self.assertEqual(entangles(compiled(in_program_order(f), 1.0)), 1)

  def test_on_tpu_a_host_callback_is_the_target_the_check_reads(self):
    # On TPU the race check reads a host callback's transfers as one call
    # of TPU_HOST_CALLBACK_TARGET; the transform names it so too (it had
    # named the CPU's target), so one declaration of it applies to both.
    tpu = names.TPU_HOST_CALLBACK_TARGET
    self.assertEqual(names.host_callback_target("io_callback", "tpu"), tpu)
    (eqn,) = jax.make_jaxpr(
      lambda x: io_callback(lambda v: v, jax.ShapeDtypeStruct((), x.dtype), x)
    )(jnp.float32(1)).eqns
    on_tpu = unittest.mock.patch.object(
      jax, "default_backend", return_value="tpu"
    )
    with on_tpu:
      found = natives.native_call(eqn, sources.current())
      assert found is not None
      self.assertIn(tpu, found.label)
      nothing = TargetDeclaration(tpu, "none", source="test")
      with unittest.mock.patch.dict(in_code.DECLARED, {tpu: nothing}):
        self.assertIsNone(natives.native_call(eqn, sources.current()))
    # Control: on CPU, the CPU's target, which that declaration leaves be.
    cpu = names.host_callback_target("io_callback", "cpu")
    self.assertNotEqual(cpu, tpu)
    with unittest.mock.patch.dict(in_code.DECLARED, {tpu: nothing}):
      found = natives.native_call(eqn, sources.current())
    assert found is not None
    self.assertIn(cpu, found.label)

  def test_every_host_callback_target_is_one(self):
    for target in (
      "xla_ffi_python_cpu_callback",
      "xla_ffi_python_gpu_callback",
      "xla_ffi_partitioned_python_cpu_callback",
      "xla_buffer_python_gpu_callback",
      "xla_python_cpu_callback",
    ):
      self.assertTrue(names.is_host_callback(target), target)
      self.assertIsNotNone(sources.BUILT_IN.for_target(target), target)
    self.assertFalse(names.is_host_callback("xla_ffi_python_cpu_callbacks"))

  def test_pure_callback_is_ordered_by_neither_half(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      y = jax.pure_callback(
        lambda t: np.float32(t), jax.ShapeDtypeStruct((), jnp.float32), token
      )
      z = jax.pure_callback(
        lambda t: np.float32(t + 1),
        jax.ShapeDtypeStruct((), jnp.float32),
        slot,
      )
      return y + z, testing.write_slot(token, 2.0)

    # The pure callbacks are the user's declaration of purity: no pair.
    self.assertEqual(testing.races(compiled(f, jnp.int32(6))), [])
    fixed = compiled(in_program_order(f), jnp.int32(6))
    self.assertEqual(entangles(fixed), 0)
    self.assertEqual(testing.races(fixed), [])


def _have(module: str) -> bool:
  return importlib.util.find_spec(module) is not None


def poisson(n: int):
  """The 5-point 2-D Poisson matrix on an n x n grid, as COO."""
  import scipy.sparse

  t = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
  eye = scipy.sparse.identity(n)
  return (scipy.sparse.kron(eye, t) + scipy.sparse.kron(t, eye)).tocoo()


class X64Test(absltest.TestCase):
  def setUp(self):
    super().setUp()
    # klujax's first import turns on jax_enable_x64 for the whole process
    # (its handles are 64-bit): on for these tests, then put back.
    self.addCleanup(
      jax.config.update, "jax_enable_x64", jax.config.read("jax_enable_x64")
    )
    jax.config.update("jax_enable_x64", True)


@absltest.skipUnless(
  _have("klujax") and _have("scipy"), "klujax 0.5.2 and scipy are needed"
)
class KlujaxTest(X64Test):
  CASES = 16

  def setUp(self):
    super().setUp()
    klujax = importlib.import_module("klujax")
    import scipy.sparse.linalg

    a = poisson(40)
    n = a.shape[0]
    ai, aj = jnp.asarray(a.row, jnp.int32), jnp.asarray(a.col, jnp.int32)
    ax = jnp.asarray(a.data)
    symbolic = klujax.analyze(ai, aj, n)
    numeric = klujax.factor(ai, aj, ax, symbolic)
    rng = np.random.default_rng(0)
    self.loads = [jnp.asarray(rng.standard_normal(n)) for _ in range(16)]
    lu = scipy.sparse.linalg.splu(a.tocsc())
    self.expected = [lu.solve(np.asarray(b)) for b in self.loads]

    def solve_cases(*loads):
      return [klujax.solve_with_numeric(numeric, b, symbolic) for b in loads]

    def by_hand(*loads):
      handle = jnp.asarray(numeric.as_list(), dtype=jnp.uint64)
      out = []
      for b in loads:
        h = handle if not out else entangle_jax.entangle(handle, out[-1])
        out.append(klujax.solve_with_numeric(h, b, symbolic))
      return out

    self.solve_cases, self.by_hand = solve_cases, by_hand

  def wrong(self, fn, runs=5) -> int:
    count = 0
    for _ in range(runs):
      got = fn(*self.loads)
      count += sum(
        not np.allclose(np.asarray(x), e, rtol=1e-9, atol=1e-9)
        for x, e in zip(got, self.expected, strict=True)
      )
    return count

  def test_sixteen_solves_on_one_numeric_handle(self):
    racy = compiled(self.solve_cases, *self.loads)
    # The control: every two solves share the handle's workspace.
    self.assertLen(testing.races(racy), self.CASES * (self.CASES - 1) // 2)
    fixed = compiled(in_program_order(self.solve_cases), *self.loads)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), self.CASES - 1)
    self.assertEqual(entangles(compiled(self.by_hand, *self.loads)), 15)
    self.assertEqual(self.wrong(fixed), 0)
    self.assertEqual(self.wrong(jax.jit(self.by_hand)), 0)


@absltest.skipUnless(_have("jax_finufft"), "jax-finufft 1.3.1 is needed")
class FinufftTest(X64Test):
  def test_nufft_calls_are_recognized_and_declared_stateless(self):
    from jax_finufft import nufft1

    x = jnp.linspace(-3.0, 3.0, 50)
    c = jnp.ones(50, jnp.complex128)

    def f(c, x):
      return nufft1(32, c, x), nufft1(32, 2 * c, x)

    decls = sources.current()
    eqns = [
      e
      for e in natives.all_eqns(jax.make_jaxpr(f)(c, x).jaxpr)
      if e.primitive.name == "nufft1"
    ]
    self.assertLen(eqns, 2)
    (call,) = lowered.lower(eqns[0]).calls
    self.assertEqual(call.target, "nufft1d1")
    # Shipped: each call makes and destroys its own plan (mode "none").
    self.assertIsNone(natives.native_call(eqns[0], decls))
    self.assertEqual(entangles(compiled(in_program_order(f), c, x)), 0)
    # Undeclared, it may write anything: ordered, as the check reads it.
    write = TargetDeclaration("nufft1d1", "write")
    with unittest.mock.patch.dict(in_code.DECLARED, {"nufft1d1": write}):
      self.assertLen(testing.races(compiled(f, c, x)), 1)  # The control.
      fixed = compiled(in_program_order(f), c, x)
      self.assertEqual(testing.races(fixed), [])
      self.assertEqual(entangles(fixed), 1)


if __name__ == "__main__":
  absltest.main()
