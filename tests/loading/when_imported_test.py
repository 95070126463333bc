"""`entangle_jax._src.when_imported`: a function runs once a module's
import has run its code (at once if it already has), with the module's
own loader back in place, and again on the next attempt if the import
failed."""

import importlib
import pathlib
import sys
import tempfile

from absl.testing import absltest

from entangle_jax._src.when_imported import call_when_imported

# A module that fails its first import while `fail_first` exists beside
# it (and deletes it), and records the loader it sees as it runs.
_MODULE = """
import pathlib

HERE = pathlib.Path(__file__).parent
LOADER_SEEN = __loader__
if (HERE / "fail_first").exists():
  (HERE / "fail_first").unlink()
  raise RuntimeError("first import fails")
"""


class WhenImportedTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    self.name = f"when_imported_probe_{id(self)}"
    (self.folder / f"{self.name}.py").write_text(_MODULE)
    sys.path.insert(0, str(self.folder))
    self.addCleanup(sys.path.remove, str(self.folder))
    self.addCleanup(sys.modules.pop, self.name, None)
    self.finders = list(sys.meta_path)
    self.addCleanup(sys.meta_path.__setitem__, slice(None), self.finders)
    self.calls = []

  def call(self) -> None:
    self.calls.append(self.name in sys.modules)

  def test_runs_after_the_import_with_the_modules_own_loader(self):
    call_when_imported(self.name, self.call)
    self.assertEqual(self.calls, [])
    module = importlib.import_module(self.name)
    self.assertEqual(self.calls, [True])
    loader = type(module.__loader__).__name__
    self.assertEqual(loader, "SourceFileLoader")
    spec = module.__spec__
    self.assertIsNotNone(spec)
    self.assertIs(getattr(spec, "loader", None), module.__loader__)
    self.assertIs(module.LOADER_SEEN, module.__loader__)
    self.assertEqual(sys.meta_path, self.finders)  # The finder left.
    importlib.reload(module)  # Once only.
    self.assertEqual(self.calls, [True])

  def test_runs_at_once_when_already_imported(self):
    importlib.import_module(self.name)
    call_when_imported(self.name, self.call)
    self.assertEqual(self.calls, [True])

  def test_a_failed_import_leaves_it_waiting_for_the_next(self):
    (self.folder / "fail_first").touch()
    call_when_imported(self.name, self.call)
    with self.assertRaisesRegex(RuntimeError, "first import fails"):
      importlib.import_module(self.name)
    self.assertEqual(self.calls, [])
    importlib.import_module(self.name)
    self.assertEqual(self.calls, [True])

  def test_a_failing_function_fails_the_import_naming_itself(self):
    def broken():
      raise ValueError("cannot register")

    call_when_imported(self.name, broken)
    with self.assertRaisesRegex(ImportError, "broken.*cannot register"):
      importlib.import_module(self.name)

  def test_control_other_modules_are_not_touched(self):
    call_when_imported(self.name, self.call)
    other = f"{self.name}_other"
    (self.folder / f"{other}.py").write_text("X = 1\n")
    self.addCleanup(sys.modules.pop, other, None)
    module = importlib.import_module(other)
    self.assertEqual(self.calls, [])
    self.assertEqual(type(module.__loader__).__name__, "SourceFileLoader")


if __name__ == "__main__":
  absltest.main()
