"""The private JAX names the sanitizer uses (`entangle_jax.testing.
_sanitize.jax_hooks`) are there, take what it passes, and are called
the way it relies on; and with the sanitizer never started, nothing of
it is in place."""

import inspect
import re

from absl.testing import absltest

from entangle_jax.testing._sanitize import jax_hooks, sites
from tests import test_util


def _without_range_ends(asm: str) -> str:
  """`asm` with each source location's range cut to its start."""
  return re.sub(r" to (?:\d+)?:\d+\)", ")", asm)


class JaxHooksTest(absltest.TestCase):
  def test_registration_takes_name_handler_platform_and_api_version(self):
    register = getattr(jax_hooks.registration_module(), jax_hooks.REGISTER)
    names = list(inspect.signature(register).parameters)
    self.assertEqual(names[:4], ["name", "fn", "platform", "api_version"])
    # jax.ffi.register_ffi_target reaches it through the module attribute.
    import jax._src.ffi as ffi

    source = inspect.getsource(ffi.register_ffi_target)
    self.assertIn(f"xla_client.{jax_hooks.REGISTER}(", source)

  def test_compile_takes_the_backend_and_the_module_first(self):
    compile_ = getattr(jax_hooks.compiler_module(), jax_hooks.COMPILE)
    names = list(inspect.signature(compile_).parameters)
    self.assertEqual(names[:2], ["backend", "computation"])
    from jax._src.interpreters import pxla

    self.assertIn(f"compiler.{jax_hooks.COMPILE}(", inspect.getsource(pxla))

  def test_compile_takes_the_host_callbacks_and_callbacks_name_them(self):
    compile_ = getattr(jax_hooks.compiler_module(), jax_hooks.COMPILE)
    names = list(inspect.signature(compile_).parameters)
    name, position = jax_hooks.COMPILE_HOST_CALLBACKS
    # After the backend and the module.
    self.assertEqual(names[2 + position], name)
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    def f(x):
      return io_callback(lambda v: v, jax.ShapeDtypeStruct((), jnp.float32), x)

    lowered = jax.jit(f).lower(jnp.float32(1.0))
    module = lowered.compiler_ir("stablehlo")

    # Each callback's custom call names its callable by index.
    def given(*a):
      return a

    annotated = sites.annotate(module, "Host", [given])
    self.assertIsNotNone(annotated)
    assert annotated is not None
    self.assertEqual(list(annotated.callbacks), [0])
    self.assertEqual(annotated.callbacks[0].host_callback, given.__qualname__)

  def test_debug_print_hands_a_partial_of_its_printer_format_first(self):
    import importlib

    module = importlib.import_module(jax_hooks.DEBUG_PRINT_MODULE)
    printer = getattr(module, jax_hooks.DEBUG_PRINT_CALLBACK)
    parameters = inspect.signature(printer).parameters
    self.assertEqual(next(iter(parameters)), "fmt")
    # jax.debug.print's lowering (or, on older jax, jax.debug.print itself)
    # makes the partial that the host callback wraps.
    self.assertRegex(
      inspect.getsource(module),
      r"partial\(\s*" + jax_hooks.DEBUG_PRINT_CALLBACK + r"\s*,\s*fmt\b",
    )

  def test_tpu_lowering_takes_the_python_callable_third(self):
    emit = getattr(jax_hooks.callback_module(), jax_hooks.TPU_CALLBACK)
    names = list(inspect.signature(emit).parameters)
    self.assertEqual(names[:3], ["backend", "ctx", "callback"])
    source = inspect.getsource(emit)
    # It hands the callable to the backend and appends what it made to the
    # module's host callbacks, which the compile then receives.
    self.assertIn("make_python_callback_from_host_send_and_recv", source)
    self.assertIn("add_host_callback(", source)
    # emit_python_callback reaches it through the module attribute.
    caller = inspect.getsource(jax_hooks.callback_module().emit_python_callback)
    self.assertIn(f"{jax_hooks.TPU_CALLBACK}(", caller)

  def test_tpu_callbacks_are_placed_in_program_order_or_not_at_all(self):
    from entangle_jax.testing._sanitize import callbacks

    def lowered(objects):
      places = [callbacks.Place() for _ in objects]
      for o, place in zip(objects, places, strict=True):
        sites._lowered[id(o)] = (o, place, "f")
      return places

    given = [object(), object()]
    module = sites.SanitizedModule("m", -1, "tpu")
    loop = (sites.Frame(sites.LOOP, 0, 1),)
    module.transfer_callbacks = [(), loop]
    module.not_observed.add(sites.HOST_TRANSFER_CALLBACKS)
    places = lowered(given)
    try:
      sites._place_tpu_callbacks(module, given)
      assert places[0].site is not None and places[1].site is not None
      self.assertEqual([p.site.position for p in places], [0, 1])
      self.assertEqual([p.site.in_loop for p in places], [False, True])
      self.assertEqual([p.site.context for p in places], [(), loop])
      self.assertEqual(module.not_observed, set())
      # Control: one callback more than the walk met: none is placed.
      other = sites.SanitizedModule("n", -2, "tpu")
      other.transfer_callbacks = [()]
      other.not_observed.add(sites.HOST_TRANSFER_CALLBACKS)
      more = lowered([object(), object()])
      sites._place_tpu_callbacks(
        other,
        [o for o, *_ in (sites._lowered[k] for k in list(sites._lowered)[-2:])],
      )
      self.assertEqual([p.site for p in more], [None, None])
      self.assertEqual(other.not_observed, {sites.HOST_TRANSFER_CALLBACKS})
    finally:
      sites._lowered.clear()

  def test_the_mlir_bindings_edit_a_module(self):
    import jax
    import jax.numpy as jnp

    ir = jax_hooks.mlir_ir()
    names = ("DictAttr", "IntegerAttr", "StringAttr", "BoolAttr", "Location")
    for name in (*names, "InsertionPoint"):
      self.assertTrue(hasattr(ir, name), name)
    self.assertTrue(hasattr(ir.Operation, "clone"))
    # The execution counter's scope, and the copy each compile is edited on.
    self.assertTrue(hasattr(ir.Location, "name"))
    self.assertTrue(hasattr(ir.Module, "parse"))
    module = jax.jit(jnp.sin).lower(1.0).compiler_ir("stablehlo")
    assert module is not None
    # No native call: nothing to annotate, and the control that a module
    # is walked (main is found) without error.
    self.assertIsNone(sites.annotate(module, "Host"))
    # The copy is the same module, locations included up to where a
    # source range ends: MLIR's bytecode drops the end of a range that
    # starts at column 0 (a frame of code run from a string, as
    # pytest-xdist's workers run theirs), and the sanitizer reads only a
    # location's file and line.
    copy = sites._copy(module)
    self.assertIsNot(copy, module)
    self.assertEqual(
      _without_range_ends(copy.operation.get_asm(enable_debug_info=True)),
      _without_range_ends(module.operation.get_asm(enable_debug_info=True)),
    )
    self.assertIn('loc("', copy.operation.get_asm(enable_debug_info=True))

  @absltest.skipIf(
    test_util.jax_version() < (0, 7),
    "jax 0.6.2 cannot print a module before optimization this way",
  )
  def test_the_module_before_optimization_prints_as_hlo(self):
    import jax
    import jax.numpy as jnp

    module = jax.jit(jnp.sin).lower(1.0).compiler_ir("stablehlo")
    # As the sanitizer keeps it: the module's bytecode.
    text = jax_hooks.hlo_text(sites._bytecode(module))
    self.assertIn("HloModule", text)
    self.assertIn("sine(", text)
    self.assertIn('op_name="jit(sin)', text)

  def test_nothing_is_in_place_when_it_never_started(self):
    run = test_util.run_python(
      "import jax\n"
      "from entangle_jax.testing import example_store\n"
      "from entangle_jax.testing._sanitize import jax_hooks, wrapping\n"
      "from jax._src.lib import xla_client\n"
      "from jax._src import compiler\n"
      "f = getattr(xla_client, jax_hooks.REGISTER)\n"
      "c = getattr(compiler, jax_hooks.COMPILE)\n"
      "print(f.__module__, c.__module__, "
      "wrapping.wrapped(example_store.WRITE_SLOT_TARGET, 'Host'))\n",
      timeout=120,
    )
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    self.assertEqual(
      run.stdout.split(), ["jaxlib.xla_client", "jax._src.compiler", "None"]
    )


if __name__ == "__main__":
  absltest.main()
