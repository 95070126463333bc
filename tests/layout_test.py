"""The tree stays easy to read: no Python module over 400 lines, no class
over 200 (the limits the restructure set, docs/development.md)."""

import ast
import pathlib
import tempfile
import unittest

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("entangle_jax", "benchmarks", "tools", "tests", "examples")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 200

if not (ROOT / "entangle_jax").is_dir():
  # CI also runs a copy of tests/ against the installed package, away from
  # the checkout: there is no source tree beside it to measure.
  raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")


def python_files() -> list[pathlib.Path]:
  return sorted(
    path
    for package in PACKAGES
    for path in (ROOT / package).rglob("*.py")
    if not any(part.startswith((".", "bazel-")) for part in path.parts)
  )


def oversized(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
  """What in `path` is over the limits, as ``file: what (lines)``."""
  text = path.read_text()
  name = path.relative_to(root)
  found = []
  lines = len(text.splitlines())
  if lines > MAX_MODULE_LINES:
    found.append(f"{name}: module ({lines} lines)")
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, ast.ClassDef):
      size = (node.end_lineno or node.lineno) - node.lineno + 1
      if size > MAX_CLASS_LINES:
        found.append(f"{name}: class {node.name} ({size} lines)")
  return found


class LayoutTest(absltest.TestCase):
  def test_modules_and_classes_within_limits(self):
    files = python_files()
    self.assertIn(ROOT / "entangle_jax" / "__init__.py", files)
    self.assertEqual([], [o for path in files for o in oversized(path)])

  def test_an_oversized_module_and_class_are_reported(self):
    folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    body = "".join(f"  x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    big = folder / "big.py"
    big.write_text("class Big:\n" + body + "\n" * MAX_MODULE_LINES)
    self.assertEqual(
      ["big.py: module (601 lines)", "big.py: class Big (201 lines)"],
      oversized(big, folder),
    )
    big.write_text("class Small:\n  x = 0\n")
    self.assertEqual([], oversized(big, folder))


if __name__ == "__main__":
  absltest.main()
