"""Reports name the user's line, not the binding's: the innermost frame
outside library code and outside the package that wrapped the call."""

import importlib
import os
import pathlib
import sys
import tempfile
import textwrap
from typing import Any, cast

import jax
import jax.numpy as jnp
from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing import example_store  # noqa: F401  (registers)
from entangle_jax.testing._analysis import source_lines as _source_lines
from tests.test_util import READ, WRITE, compiled, records_full_stack

# A third-party-style binding of the example store's targets: its own
# jax.ffi.ffi_call wrappers, in a package of its own.
BINDING = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp


  def counter_set(handle, value):
    call = jax.ffi.ffi_call(
      "entangle_jax_write_slot",
      jax.ShapeDtypeStruct(jnp.shape(handle), jnp.int32),
      has_side_effect=True,
    )
    return call(handle, jnp.asarray(value, jnp.float32))  # line 12


  def counter_get(handle):
    result = jax.ShapeDtypeStruct(jnp.shape(handle), jnp.float32)
    call = jax.ffi.ffi_call("entangle_jax_read_slot", result)
    return call(handle)  # line 18
  """
)

# The user's program, a module outside the binding's package.
PROGRAM = textwrap.dedent(
  """
  from {package} import counter_get, counter_set


  def step(h):
    t = counter_set(h, 1.0)
    x = counter_get(t)  # line 7
    counter_set(t, 2.0)  # line 8
    return x
  """
)


class SourceLinesTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not records_full_stack():
      self.skipTest("this jax records only the innermost Python frame")
    self.root = pathlib.Path(tempfile.mkdtemp())
    sys.path.insert(0, str(self.root))
    self.addCleanup(sys.path.remove, str(self.root))

  def module(self, name: str, text: str):
    path = self.root / f"{name.replace('.', '/')}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    self.addCleanup(sys.modules.pop, name, None)
    return importlib.import_module(name)

  def race(self, step):
    found = testing.races(compiled(step, jnp.int32(0)))
    self.assertLen(found, 1)
    (race,) = found
    self.assertEqual({race.first.target, race.second.target}, {READ, WRITE})
    return race

  def test_the_users_line_and_the_bindings(self):
    (self.root / "tp_binding").mkdir()
    (self.root / "tp_binding" / "__init__.py").write_text(BINDING)
    self.addCleanup(sys.modules.pop, "tp_binding", None)
    program = self.module("user_program", PROGRAM.format(package="tp_binding"))
    race = self.race(program.step)
    get = race.first if race.first.target == READ else race.second
    assert get.location is not None and get.binding_location is not None
    self.assertTrue(get.location.endswith("user_program.py:7"), get.location)
    self.assertTrue(
      get.binding_location.endswith("tp_binding/__init__.py:18"),
      get.binding_location,
    )
    text = testing.format_races([race])
    self.assertIn("user_program.py:8 (in the binding at ", text)

  def test_control_a_call_in_the_users_own_file_is_its_own_line(self):
    program = self.module("own_calls", BINDING + PROGRAM.split("\n", 2)[2])
    race = self.race(program.step)
    get = race.first if race.first.target == READ else race.second
    assert get.location is not None
    self.assertTrue(get.location.endswith("own_calls.py:18"), get.location)
    self.assertIsNone(get.binding_location)

  def test_a_binding_in_the_users_package_marks_itself(self):
    (self.root / "app").mkdir()
    (self.root / "app" / "__init__.py").write_text("")
    self.module("app.ffi", BINDING)
    program = self.module("app.main", PROGRAM.format(package="app.ffi"))
    get = self.race(program.step)
    op = get.first if get.first.target == READ else get.second
    assert op.location is not None and op.binding_location is not None
    # One package: all of `app` counts as the binding, so the line named is
    # the first outside it (this test's helper), not app/main.py's.
    self.assertTrue(op.binding_location.endswith("app/ffi.py:18"))
    self.assertFalse(op.location.endswith("app/main.py:7"), op.location)
    testing.mark_library("app.ffi")
    self.addCleanup(_source_lines._marked.clear)
    self.addCleanup(_source_lines._is_library.cache_clear)
    op = self.race(program.step)
    op = op.first if op.first.target == READ else op.second
    assert op.location is not None
    self.assertTrue(op.location.endswith("app/main.py:7"), op.location)

  def test_installed_packages_of_another_environment_are_library_code(self):
    # A dump checked from another environment than the program's: its
    # installed binding is still library code, wherever that venv lies.
    elsewhere = os.path.join(self.root, "venv", "lib", "python3", "{}")
    for folder in ("site-packages", "dist-packages"):
      binding = os.path.join(elsewhere.format(folder), "klujax.py")
      self.assertTrue(_source_lines._is_library(binding), binding)
    # Control: a project below this interpreter's prefix, not installed,
    # is the user's code (the system Python's /usr and /usr/src/app).
    project = os.path.join(sys.prefix, "app-under-prefix", "main.py")
    self.assertFalse(_source_lines._is_library(project))
    self.assertTrue(_source_lines._is_library(os.__file__))  # The stdlib.

  def test_an_installed_binding_is_named_as_the_binding(self):
    # klujax's shape: the line that called jax.ffi.ffi_call lies in an
    # installed package; the user's line is the first outside library code.
    site = os.path.join(self.root, "venv", "lib", "python3", "site-packages")
    binding = (os.path.join(site, "klujax", "_ops.py"), 40)
    user = (str(self.root / "test_solve.py"), 12)
    runner = (os.path.join(os.path.dirname(pytest_file()), "python.py"), 9)
    self.assertEqual(
      _source_lines.lines((binding, user, runner)), (user, binding)
    )
    # The control: JAX's own frame innermost names no binding.
    jax_frame = (jax.__file__, 1)
    self.assertEqual(
      _source_lines.lines((jax_frame, user, runner)), (user, None)
    )

  def test_mark_library_refuses_what_it_cannot_find(self):
    with self.assertRaisesRegex(ValueError, "neither an importable"):
      testing.mark_library("no_such_package_anywhere")
    with self.assertRaisesRegex(TypeError, "package names or directories"):
      testing.mark_library(cast(Any, 3))


def pytest_file() -> str:
  import _pytest

  return _pytest.__file__


if __name__ == "__main__":
  absltest.main()
