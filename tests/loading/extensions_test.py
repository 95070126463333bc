"""The two extensions: what each import loads and registers, and the error
that says how to rebuild an extension that cannot be loaded."""

import pathlib
import re
import sys
import textwrap
from unittest import mock

from absl.testing import absltest

from entangle_jax._src import native
from entangle_jax.testing import example_store
from tests import test_util

# In a fresh interpreter: which extensions `import entangle_jax`, then
# `import entangle_jax.testing`, then the first use of an example store name
# load, and whether XLA then knows the example resource's write target.
# Prints one line per stage (the loaded extensions, then "registered" or the
# error), the targets declared read in code before and after the store
# loads (none: the analysis knows the store's targets built in, loaded or
# not), and the built-in mode of its read.
_STAGES = textwrap.dedent(
  """
  import sys
  import jax, jax.numpy as jnp

  write = jax.ffi.ffi_call(
    "entangle_jax_write_slot",
    jax.ShapeDtypeStruct((), jnp.int32),
    has_side_effect=True,
  )

  def stage():
    loaded = sorted(m for m in sys.modules if m.endswith("_ffi"))
    try:
      jax.jit(lambda: write(jnp.int32(0), jnp.float32(1))).lower().compile()
      known = "registered"
    except Exception as error:
      known = type(error).__name__
    print(loaded, known)

  import entangle_jax
  stage()
  import entangle_jax.testing
  stage()
  from entangle_jax._src.targets import in_code
  from entangle_jax.testing import declarations_in_effect
  known = declarations_in_effect().for_target("entangle_jax_read_slot")
  print(sorted(in_code.code_read_targets()), known.mode)
  entangle_jax.testing.write_slot
  stage()
  print(sorted(in_code.code_read_targets()))
  """
)


class RegistrationTest(absltest.TestCase):
  def test_only_entangle_is_loaded_until_the_store_is_used(self):
    result = test_util.run_python(_STAGES, timeout=120, fresh=True)
    self.assertEqual(result.returncode, 0, result.stderr)
    production, analysis, reads_before, store, reads_after = (
      result.stdout.strip().splitlines()
    )
    # jax < 0.7 names the compiler's error XlaRuntimeError.
    unregistered = [
      "['entangle_jax._src._entangle_ffi'] JaxRuntimeError",
      "['entangle_jax._src._entangle_ffi'] XlaRuntimeError",
    ]
    self.assertIn(production, unregistered)
    # The analysis alone loads no test extension and declares nothing.
    self.assertIn(analysis, unregistered)
    self.assertEqual(reads_before, "[] read")
    self.assertEqual(reads_after, "[]")
    # The example resource's CUDA extension, where it was built, loads too.
    self.assertRegex(
      store,
      r"^\['entangle_jax._src._entangle_ffi', "
      r"('entangle_jax.testing._example_resource_cuda_ffi', )?"
      r"'entangle_jax.testing._example_resource_ffi'\] registered$",
    )


def one_course() -> tuple[str, str]:
  """The rebuild advice this install should get, as a pattern, and the
  other course, which must be absent (one course, issue 80): a checkout's
  package (an editable install: the build's template is beside it) is
  installed again editable from that checkout; an installed one is
  reinstalled."""
  package = pathlib.Path(native.__file__).resolve().parents[1]
  editable = f"-m pip install -e {re.escape(str(package.parent))}"
  reinstall = "-m pip install --force-reinstall entangle-jax"
  if (package / "_version.py.in").is_file():
    return editable, "--force-reinstall"
  return re.escape(reinstall), "pip install -e"


class LoadErrorTest(absltest.TestCase):
  def assert_one_course(self, error: ImportError) -> None:
    course, other = one_course()
    self.assertRegex(str(error), course)
    self.assertNotIn(other, str(error))
    self.assertIn(sys.executable, str(error))

  def test_unloadable_entangle_extension_explains_how_to_rebuild(self):
    # A None entry in sys.modules makes `import` of that name fail; the
    # package attribute left by the first import must go too.
    package = sys.modules["entangle_jax._src"]
    with (
      mock.patch.dict(sys.modules, {"entangle_jax._src._entangle_ffi": None}),
      mock.patch.dict(package.__dict__),
    ):
      package.__dict__.pop("_entangle_ffi", None)
      with self.assertRaisesRegex(ImportError, r"_entangle_ffi ") as raised:
        native.load()
    self.assert_one_course(raised.exception)

  def test_unloadable_example_resource_explains_how_to_rebuild(self):
    package = sys.modules["entangle_jax.testing"]
    name = "entangle_jax.testing._example_resource_ffi"
    with (
      mock.patch.dict(sys.modules, {name: None}),
      mock.patch.dict(package.__dict__),
    ):
      package.__dict__.pop("_example_resource_ffi", None)
      with self.assertRaisesRegex(
        ImportError, r"_example_resource_ffi "
      ) as raised:
        native.load_extension("entangle_jax.testing", "_example_resource_ffi")
    self.assert_one_course(raised.exception)

  def test_loadable_extensions(self):
    self.assertIn("entangle", native.load().registrations())
    store = native.load_extension(
      "entangle_jax.testing", "_example_resource_ffi"
    )
    self.assertGreater(store.num_slots, 0)
    self.assertEqual(example_store.NUM_SLOTS, store.num_slots)


if __name__ == "__main__":
  absltest.main()
