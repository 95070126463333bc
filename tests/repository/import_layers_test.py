"""The package's modules import one another without a cycle, and the
analysis's layers only look down: _hlo imports nothing of _order or
_report, _order nothing of _report."""

import ast
import pathlib
import unittest

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "entangle_jax"

# Each layer, and the layers it must not import.
LAYERS = {
  "entangle_jax.testing._hlo": (
    "entangle_jax.testing._order",
    "entangle_jax.testing._report",
  ),
  "entangle_jax.testing._order": ("entangle_jax.testing._report",),
}


def module_names() -> dict[str, pathlib.Path]:
  found = {}
  for path in PACKAGE.rglob("*.py"):
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    found[".".join(parts)] = path
  return found


def imported(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
  """The package modules `path` imports when it is imported (module level,
  not under ``if TYPE_CHECKING``)."""
  found = set()
  for node in ast.parse(path.read_text()).body:
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name in modules}
    elif isinstance(node, ast.ImportFrom) and node.module in modules:
      for alias in node.names:
        child = f"{node.module}.{alias.name}"
        found.add(child if child in modules else node.module)
  return found


def cycle(graph: dict[str, set[str]]) -> list[str]:
  """A cycle of `graph` as the modules along it, or [] if there is none."""
  state: dict[str, int] = {}
  for start in sorted(graph):
    if start in state:
      continue
    path = [start]
    stack = [iter(sorted(graph[start]))]
    state[start] = 1
    while stack:
      step = next(stack[-1], None)
      if step is None:
        state[path.pop()] = 2
        stack.pop()
      elif state.get(step) == 1:
        return [*path[path.index(step) :], step]
      elif step not in state:
        state[step] = 1
        path.append(step)
        stack.append(iter(sorted(graph[step])))
  return []


class ImportLayersTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not PACKAGE.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")
    modules = module_names()
    self.graph = {m: imported(p, modules) for m, p in modules.items()}

  def test_no_import_cycle(self):
    self.assertIn("entangle_jax.testing._order.rules", self.graph)
    self.assertEqual(cycle(self.graph), [])

  def test_layers_import_only_downwards(self):
    for module, imports in self.graph.items():
      for layer, above in LAYERS.items():
        if module == layer or module.startswith(layer + "."):
          bad = [i for i in imports if i.startswith(above)]
          self.assertEqual(bad, [], module)

  def test_a_cycle_is_found(self):
    # The control: the search finds a cycle where there is one.
    self.assertEqual(
      cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"]
    )
    self.assertEqual(cycle({"a": {"b"}, "b": set()}), [])


if __name__ == "__main__":
  absltest.main()
