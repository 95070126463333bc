"""`in_program_order` orders the native calls JAX's own primitives make
(issue 67, defects 2 to 4), which a list of JAX's kernels had passed by
unordered, with no entangle and no warning:

* ``call_exported`` (``Exported.call``): the exported module's custom
  calls, read from its lowering as a binding's primitive's are;
* ``debug_print`` (``jax.debug.print`` on jax 0.10; ``debug_callback`` on
  other versions): a host callback, as ``jax.debug.callback``;
* ``custom_linear_solve`` (``jax.scipy.sparse.linalg.cg`` included) and
  ``composite``: ordered as one native call read from their lowering,
  where they raised NotImplementedError;
* any other JAX primitive whose lowering makes a native call.

Each test has its control: the program without the transform races
(``testing.races``), and where it runs the calls out of order, a run shows
it (the values read from the example store, or the order the callbacks
recorded); with the transform no race is left and every run is right.
"""

import functools
import sys
import time
import types
import unittest.mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax import export, lax
from jax.core import ShapedArray
from jax.experimental import io_callback
from jax.extend import core as jex_core
from jax.interpreters import mlir

from entangle_jax import in_program_order, testing
from entangle_jax._src.program_order import lowered, natives
from entangle_jax._src.targets import library_kernels, names, sources
from entangle_jax.testing import example_store
from tests.program_order.program_order_programs import compiled, entangles

HAZARDS = 16
RUNS = 10
SLOW_US = 1000


def hazards(read_of, write_of=None):
  """Per hazard: write 1 into a slot, read it (slowly) through `read_of`,
  then write 2 through `write_of` (the store's write by default). Returns
  ``(reads, big, last writes)``: every read is 1 in program order, and
  the large array keeps XLA:CPU's threads busy, so that unordered calls
  run together."""
  write_of = write_of or (lambda token: testing.write_slot(token, 2.0))

  def f(big):
    reads, last = [], []
    for i in range(HAZARDS):
      token = testing.write_slot(i + 20, 1.0)
      reads.append(read_of(token))
      last.append(write_of(token))
    return jnp.stack(reads), jnp.sin(big).sum(), jnp.stack(last)

  return f


# A NumPy array: one made by jnp at import would start JAX's backend.
BIG = np.ones(1 << 16, np.float32)


def wrong(c, runs=RUNS) -> int:
  """Reads of `c` (a compiled `hazards` program) that did not see 1."""
  return sum(int(np.sum(np.asarray(c(BIG)[0]) != 1.0)) for _ in range(runs))


def slow_read(token):
  return testing.read_slot(token, delay_us=SLOW_US)


def exported(fn, *args):
  """`fn` through a ``jax.export`` round trip (serialized and read back),
  the store's and entangle's targets allowed."""
  checks = [
    export.DisabledSafetyCheck.custom_call(target)
    for target in (
      example_store.READ_SLOT_TARGET,
      example_store.WRITE_SLOT_TARGET,
      names.ENTANGLE_TARGET,
    )
  ]
  exp = export.export(jax.jit(fn), disabled_checks=checks)(*args)
  return export.deserialize(exp.serialize())


class OrderedTestCase(parameterized.TestCase):
  def assert_ordered(self, f):
    """`f` (a `hazards` program) races and runs its reads out of order
    without the transform; with it, neither. Returns the fixed one."""
    racy = compiled(f, BIG)
    self.assertNotEmpty(testing.races(racy))  # The control.
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # Ordered, not warned about.
      fixed = compiled(in_program_order(f), BIG)
    self.assertEqual(testing.races(fixed), [])
    self.assertGreater(entangles(fixed), 0)
    self.assertEqual(wrong(fixed), 0)
    if not wrong(racy):  # The run-time control.
      self.skipTest("this XLA happened to run every read first, unordered")
    return fixed


class ExportedCallsTest(OrderedTestCase):
  """An ``Exported.call`` binds ``call_exported`` (inside a custom_vjp),
  which holds the exported module: its custom calls are the native calls
  it makes, read from its lowering. Before, each program was wrong in
  every run (15 of 15), with one race left and no entangle."""

  def test_an_exported_read(self):
    exp = exported(slow_read, jnp.int32(0))
    self.assert_ordered(hazards(exp.call))

  def test_an_exported_write(self):
    exp = exported(lambda t: testing.write_slot(t, 2.0), jnp.int32(0))
    self.assert_ordered(hazards(slow_read, exp.call))

  def test_an_exported_function_ordered_inside(self):
    exp = exported(in_program_order(slow_read), jnp.int32(0))
    self.assert_ordered(hazards(exp.call))

  def test_the_primitive_is_read_from_its_lowering(self):
    exp = exported(slow_read, jnp.int32(0))
    jaxpr = jax.make_jaxpr(exp.call)(jnp.int32(0))
    eqns = [
      e
      for e in natives.all_eqns(jaxpr.jaxpr)
      if e.primitive.name == "call_exported"
    ]
    self.assertLen(eqns, 1)
    self.assertTrue(lowered.is_jax_primitive(eqns[0].primitive))
    found = natives.native_call(eqns[0], sources.current())
    assert found is not None
    self.assertEqual(found.label, example_store.READ_SLOT_TARGET)


class DebugPrintTest(parameterized.TestCase):
  """``jax.debug.print`` is a host callback (``debug_print`` on jax 0.10,
  lowered as a ``debug_callback``). Before, it was read as one of JAX's
  own kernels: a print after a slow callback ran first in every run (0
  of 8 in order)."""

  def program(self, seen, with_operand=True):
    def slow(x):
      time.sleep(0.05)
      seen.append("A")
      return x

    def f(x, big):
      a = io_callback(slow, jax.ShapeDtypeStruct((), jnp.float32), x)
      # Nothing but the order puts it after A.
      if with_operand:
        jax.debug.print("B {}", x)
      else:  # As the issue wrote it: a carrier operand orders it.
        jax.debug.print("B")
      return a, jnp.sin(big).sum()  # Threads kept busy: calls run together.

    return f

  def order(self, c, seen, runs=4) -> list[list[str]]:
    class Recorder:
      def write(self, text):
        if text.startswith("B"):
          seen.append("B")

      def flush(self):
        pass

    got = []
    for _ in range(runs):
      seen.clear()
      with unittest.mock.patch.object(sys, "stdout", Recorder()):
        jax.block_until_ready(c(jnp.float32(1.0), BIG))
        jax.effects_barrier()
      got.append(list(seen))
    return got

  @parameterized.parameters(True, False)
  def test_a_print_after_a_callback_runs_after_it(self, with_operand):
    seen: list[str] = []
    f = self.program(seen, with_operand)
    primitives = {
      e.primitive.name for e in jax.make_jaxpr(f)(jnp.float32(1.0), BIG).eqns
    }
    self.assertTrue(primitives & {"debug_print", "debug_callback"})
    racy = compiled(f, jnp.float32(1.0), BIG)
    self.assertLen(testing.races(racy), 1)  # The control.
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      fixed = compiled(in_program_order(f), jnp.float32(1.0), BIG)
    self.assertEqual(testing.races(fixed), [])
    self.assertEqual(entangles(fixed), 1)
    self.assertEqual(self.order(fixed, seen), [["A", "B"]] * 4)
    if ["A", "B"] in self.order(racy, seen):  # The run-time control.
      self.skipTest("this XLA happened to run the callback first, unordered")

  def test_a_print_whose_text_a_carrier_would_change_is_warned_about(self):
    def f(x):
      a = io_callback(lambda v: v, jax.ShapeDtypeStruct((), jnp.float32), x)
      jax.debug.print("B {{literal braces}}")
      return a

    primitives = {e.primitive.name for e in jax.make_jaxpr(f)(1.0).eqns}
    if "debug_print" not in primitives:  # jax 0.6-0.9: a debug_callback.
      with warnings.catch_warnings():
        warnings.simplefilter("error")  # Its callback hides the carrier.
        compiled(in_program_order(f), jnp.float32(1.0))
      return
    with self.assertWarnsRegex(UserWarning, "jax.debug.print with no"):
      compiled(in_program_order(f), jnp.float32(1.0))


def solve_read(token):
  """A ``custom_linear_solve`` of the identity whose solve reads the slot
  (slowly): the slot's value is its result."""
  b = jnp.ones(1)

  def solve(matvec, r):
    del matvec
    return r * slow_read(token)

  return lax.custom_linear_solve(lambda v: v, b, solve, symmetric=True)[0]


def cg_read(token):
  """``cg`` with a preconditioner that reads the slot: its solution is 1
  where the slot held 1, NaN otherwise."""

  def precondition(v):
    return v * jnp.where(slow_read(token) == 1.0, 1.0, jnp.nan)

  x, _ = jax.scipy.sparse.linalg.cg(
    lambda v: v, jnp.ones(1), M=precondition, maxiter=2
  )
  return x[0]


def composite_read(token):
  return lax.composite(slow_read, name="entangle_test.read")(token)


class WholeLoweringsTest(OrderedTestCase):
  """``custom_linear_solve`` and ``composite`` hold their native calls in
  sub-programs; each is ordered as one native call read from its
  lowering. Before, in_program_order raised NotImplementedError (and plain
  jit was wrong in 15 of 15 runs)."""

  @parameterized.named_parameters(
    ("custom_linear_solve", solve_read),
    ("cg_preconditioner", cg_read),
    ("composite", composite_read),
  )
  def test_its_calls_are_ordered(self, read_of):
    self.assert_ordered(hazards(read_of))

  def grad_program(self):
    def loss(b, big):
      reads = []
      for i in range(4):
        token = testing.write_slot(i + 20, 1.0)

        def solve(matvec, r, token=token):
          del matvec
          return r * slow_read(token)

        x = lax.custom_linear_solve(lambda v: v, b, solve, symmetric=True)
        reads.append(x[0])
        testing.write_slot(token, 2.0)
      total = jnp.stack(reads).sum() + 0 * jnp.sin(big).sum()
      return total, jnp.stack(reads)

    return loss

  def test_under_grad(self):
    loss = self.grad_program()
    args = (jnp.ones(1), BIG)
    grad = functools.partial(jax.grad, has_aux=True)
    self.assertNotEmpty(testing.races(compiled(grad(loss), *args)))
    # The gradient whole, as the race report's fix says: every call, the
    # transposed solves' included, in the gradient's program order.
    inside = compiled(in_program_order(grad(loss)), *args)
    self.assertEqual(testing.races(inside), [])
    for _ in range(RUNS):
      g, reads = inside(*args)
      np.testing.assert_array_equal(reads, np.ones(4))
      # The transposed solves run after the second writes, as written.
      np.testing.assert_array_equal(g, [8.0])
    # Differentiated outside, it still binds: the forward calls ordered.
    outside = compiled(grad(in_program_order(loss)), *args)
    for _ in range(RUNS):
      np.testing.assert_array_equal(outside(*args)[1], np.ones(4))


# One of JAX's own primitives that no list names: a global of a module
# under ``jax.`` (as JAX's primitives are), lowered to the store's read.
own_read_p = jex_core.Primitive("entangle_test_jax_own_read")
own_read_p.def_abstract_eval(lambda token, **_: ShapedArray((), jnp.float32))
_fake = types.ModuleType("jax._entangle_test_primitives")
_fake.__dict__["read_p"] = own_read_p
mlir.register_lowering(
  own_read_p,
  jax.ffi.ffi_lowering(example_store.READ_SLOT_TARGET),
  platform="cpu",
)


def own_read(token):
  token = jnp.asarray(token, jnp.int32)
  return own_read_p.bind(token, delay_us=np.int64(SLOW_US))


class JaxOwnPrimitivesTest(OrderedTestCase):
  def test_an_unlisted_primitive_is_read_from_its_lowering(self):
    with unittest.mock.patch.dict(sys.modules, {_fake.__name__: _fake}):
      self.assertTrue(lowered.is_jax_primitive(own_read_p))
      self.assert_ordered(hazards(own_read))

  def test_plain_parameters_are_read_once_a_kind(self):
    # Slices of one handle array at 40 starts: one lowering of ``slice``,
    # not one a start (a long program made thousands).
    def f(handles):
      return [testing.read_slot(handles[k]) for k in range(40)]

    handles = np.arange(40, dtype=np.int32)
    seen = []
    real = lowered._lower

    def counted(eqn):
      seen.append(eqn.primitive.name)
      return real(eqn)

    with (
      unittest.mock.patch.object(natives, "_NO_NATIVE_KINDS", set()),
      unittest.mock.patch.object(lowered, "_lower", counted),
      unittest.mock.patch.dict(lowered._CACHE, clear=True),
    ):
      jax.jit(in_program_order(f)).lower(handles)
    self.assertEqual(seen.count("slice"), 1)

  def test_a_kind_that_made_a_native_call_is_read_each_time(self):
    # The same primitive at two parameters: each equation read, each
    # ordered (a kind is passed by only when it made no native call).
    with (
      unittest.mock.patch.dict(sys.modules, {_fake.__name__: _fake}),
      unittest.mock.patch.object(natives, "_NO_NATIVE_KINDS", set()),
    ):
      jaxpr = jax.make_jaxpr(
        lambda t: [
          own_read_p.bind(t, delay_us=np.int64(1)),
          own_read_p.bind(t, delay_us=np.int64(2)),
        ]
      )(jnp.int32(0))
      decls = sources.current()
      for eqn in jaxpr.eqns:
        self.assertIsNotNone(natives.native_call(eqn, decls))

  def test_a_pure_kernel_is_no_native_call(self):
    # approx_max_k lowers to ApproxTopK, which XLA:CPU makes a TopK.
    jaxpr = jax.make_jaxpr(lambda v: lax.approx_max_k(v, 2))(jnp.ones(8))
    (eqn,) = jaxpr.eqns
    self.assertTrue(library_kernels.is_library_target("ApproxTopK"))
    self.assertIsNone(natives.native_call(eqn, sources.current()))
    self.assertEqual(
      [c.target for c in lowered.lower(eqn).calls], ["ApproxTopK"]
    )


if __name__ == "__main__":
  absltest.main()
