"""The package's modules import one another without a cycle, and the race
check's stages only look down.

``entangle_jax.testing`` is a pipeline of stages, each a folder that
imports only the stages before it (docs/development.md, "Internals"): text
in (``_hlo``), order (``_order``), the facade (``_analysis``), findings as
plain records (``_findings``), the emitters that write them
(``_emitters``), the run-time sanitizer (``_sanitize``), and the ways
in (``_ways_in``). No emitter reads the HLO,
order or analysis stages: emitters see records only, and among the
findings only the builders ``from_analysis`` and ``from_ranks`` read the
analysis. Above them sit only
the public face, the entry-point shims and the example store. Of the core
package the stages read only what a native target does (``_src.targets``),
how ``Resource`` records its accesses (``_src.access_marker``), what a
call touches (``_src.access_policy``), when two calls conflict
(``_src.conflict_rule``) and what is said of why (``_src.reason_words``),
which load no extension; the core never
imports ``entangle_jax.testing``."""

import ast
import pathlib
import tempfile
import unittest

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "entangle_jax"

TESTING = "entangle_jax.testing"
STAGES = tuple(
  f"{TESTING}.{name}"
  for name in (
    "_hlo",
    "_order",
    "_analysis",
    "_findings",
    "_emitters",
    "_sanitize",
    "_ways_in",
  )
)
"""The stages, in pipeline order."""

EMITTERS = f"{TESTING}._emitters"
BEHIND_THE_RECORDS = tuple(
  f"{TESTING}.{name}" for name in ("_hlo", "_order", "_analysis")
)
"""The stages no emitter may import: it reads the findings' records."""
BUILDERS = [
  f"{TESTING}._findings.from_analysis",
  f"{TESTING}._findings.from_ranks",
]
"""The modules of the findings stage that read the analysis: one builds
the single-process check's records, the other the cross-rank check's."""

TOP = frozenset(
  f"{TESTING}{name}"
  for name in ("", ".__main__", ".pytest_plugin", ".example_store")
)
"""The modules of ``entangle_jax.testing`` outside the stages: the public
face, the two entry-point shims and the example store."""

LIGHT_CORE = (
  "entangle_jax._src.targets",
  "entangle_jax._src.access_marker",
  "entangle_jax._src.access_policy",
  "entangle_jax._src.conflict_rule",
  "entangle_jax._src.reason_words",
)
"""What the stages may import of the core package: no extension, no
registration."""


def within(module: str, package: str) -> bool:
  return module == package or module.startswith(package + ".")


def stage_of(module: str) -> int | None:
  """The number of the stage `module` is in (0 for the first), or None."""
  return next(
    (k for k, stage in enumerate(STAGES) if within(module, stage)), None
  )


def module_names() -> dict[str, pathlib.Path]:
  found = {}
  for path in PACKAGE.rglob("*.py"):
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    found[".".join(parts)] = path
  return found


def _names(nodes, modules: dict[str, pathlib.Path]) -> set[str]:
  """The package modules the import statements among `nodes` name."""
  found = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name in modules}
    elif isinstance(node, ast.ImportFrom) and node.module in modules:
      for alias in node.names:
        child = f"{node.module}.{alias.name}"
        found.add(child if child in modules else node.module)
  return found


def imported(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
  """The package modules `path` imports when it is imported (module level,
  not under ``if TYPE_CHECKING``)."""
  return _names(ast.parse(path.read_text()).body, modules)


def imported_anywhere(
  path: pathlib.Path, modules: dict[str, pathlib.Path]
) -> set[str]:
  """The package modules `path` imports anywhere: at module level and
  inside functions (an import deferred to first use is still a
  dependency), not under ``if TYPE_CHECKING``."""
  tree = ast.parse(path.read_text())
  skipped = {
    id(inner)
    for node in ast.walk(tree)
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    for stmt in node.body
    for inner in ast.walk(stmt)
  }
  return _names((n for n in ast.walk(tree) if id(n) not in skipped), modules)


def imported_or_typed(
  path: pathlib.Path, modules: dict[str, pathlib.Path]
) -> set[str]:
  """The package modules `path` imports outside its functions, those it
  imports only for its type hints (``if TYPE_CHECKING``) included: a
  cycle there is a cycle of what the modules mean, which a type checker
  follows and a reader must too, even where Python never runs it."""
  tree = ast.parse(path.read_text())
  nodes: list[ast.AST] = []
  todo: list[ast.AST] = list(tree.body)
  while todo:
    node = todo.pop()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
      continue  # Deferred to a call: `imported_anywhere` has them.
    nodes.append(node)
    todo.extend(ast.iter_child_nodes(node))
  return _names(nodes, modules)


def behind_the_records(imports: set[str]) -> list[str]:
  """The modules among `imports` that no emitter may import."""
  return sorted(
    i for i in imports if any(within(i, s) for s in BEHIND_THE_RECORDS)
  )


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
  graph: dict[str, set[str]]
  anywhere: dict[str, set[str]]

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    if not PACKAGE.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")
    # Once for the class: parsing every module of the package took most of
    # each test's time, and no test changes the package.
    modules = module_names()
    cls.graph = {m: imported(p, modules) for m, p in modules.items()}
    cls.anywhere = {
      m: imported_anywhere(p, modules) for m, p in modules.items()
    }

  def test_no_import_cycle(self):
    self.assertIn("entangle_jax.testing._order.rules", self.graph)
    self.assertEqual(cycle(self.graph), [])

  def test_no_import_cycle_counting_imports_for_type_hints(self):
    # Issue 59: the interpreter imported its rules, and the rules imported
    # the interpreter for its type (`Context`) under TYPE_CHECKING.
    modules = module_names()
    graph = {m: imported_or_typed(p, modules) for m, p in modules.items()}
    rules = "entangle_jax._src.program_order.rules.registry"
    self.assertIn(rules, graph["entangle_jax._src.program_order.interpreter"])
    self.assertEqual(cycle(graph), [])

  def test_a_cycle_through_a_type_checking_import_is_found(self):
    # The control: the two modules of issue 59's cycle, as they were.
    with tempfile.TemporaryDirectory() as tmp:
      root = pathlib.Path(tmp)
      (root / "interpreter.py").write_text("import registry\n")
      (root / "registry.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "  from interpreter import Context\n"
      )
      modules = {p.stem: p for p in root.glob("*.py")}
      typed = {m: imported_or_typed(p, modules) for m, p in modules.items()}
      run = {m: imported(p, modules) for m, p in modules.items()}
    self.assertEqual(cycle(typed), ["interpreter", "registry", "interpreter"])
    self.assertEqual(cycle(run), [])  # What the older test saw.

  def test_every_module_of_testing_is_in_a_stage_or_on_top(self):
    testing = [m for m in self.graph if within(m, TESTING)]
    self.assertIn(f"{TESTING}._ways_in.plugin", testing)
    outside = [m for m in testing if stage_of(m) is None and m not in TOP]
    self.assertEqual(outside, [])
    # The top holds at most five modules (the public face, shims, store).
    top = [m for m in testing if stage_of(m) is None]
    self.assertLessEqual(len(top), 5, top)

  def test_stages_import_only_earlier_stages_and_the_light_core(self):
    for module, imports in self.anywhere.items():
      stage = stage_of(module)
      if stage is None:
        continue
      for name in imports:
        other = stage_of(name)
        if other is not None:
          self.assertLessEqual(other, stage, f"{module} imports {name}")
        else:
          self.assertTrue(
            name.startswith(LIGHT_CORE), f"{module} imports {name}"
          )

  def test_no_emitter_reads_behind_the_records(self):
    emitters = [m for m in self.anywhere if within(m, EMITTERS)]
    self.assertIn(f"{EMITTERS}.sarif", emitters)
    for module in emitters:
      self.assertEqual(behind_the_records(self.anywhere[module]), [], module)

  def test_only_the_builders_of_the_findings_read_the_analysis(self):
    findings = f"{TESTING}._findings"
    readers = sorted(
      m
      for m, imports in self.anywhere.items()
      if within(m, findings) and behind_the_records(imports)
    )
    self.assertEqual(readers, BUILDERS)

  def test_an_emitter_reading_the_analysis_is_found(self):
    # The control: an emitter that imports the analysis (even inside a
    # function) breaks the rule above; one that reads records does not.
    folder = pathlib.Path(tempfile.mkdtemp())
    modules = module_names()
    bad, good = folder / "bad.py", folder / "good.py"
    bad.write_text(
      "def f():\n  from entangle_jax.testing._analysis import ops\n"
    )
    good.write_text("from entangle_jax.testing._findings import records\n")
    self.assertEqual(
      behind_the_records(imported_anywhere(bad, modules)),
      [f"{TESTING}._analysis.ops"],
    )
    self.assertEqual(behind_the_records(imported_anywhere(good, modules)), [])

  def test_the_core_never_imports_testing(self):
    for module, imports in self.anywhere.items():
      if within(module, TESTING) or within(module, "entangle_jax.demo"):
        continue
      bad = [i for i in imports if within(i, TESTING)]
      self.assertEqual(bad, [], module)

  def test_the_targets_table_imports_only_itself(self):
    # The transform in the core and the command over dumps both read it;
    # neither may pay for jax or an extension to do so.
    targets = "entangle_jax._src.targets"
    for module, imports in self.anywhere.items():
      if within(module, targets):
        bad = [i for i in imports if not within(i, targets)]
        self.assertEqual(bad, [], module)

  def test_a_stage_importing_a_later_one_is_found(self):
    # The control: the stage rule does catch an upward import.
    self.assertEqual(stage_of(f"{TESTING}._order.rules"), 1)
    self.assertEqual(stage_of(f"{TESTING}._sanitize.session"), 5)
    self.assertEqual(stage_of(f"{TESTING}._ways_in.command"), 6)
    self.assertIsNone(stage_of(f"{TESTING}._orderly"))
    self.assertEqual(stage_of(f"{TESTING}._findings.records"), 3)
    self.assertEqual(stage_of(f"{TESTING}._emitters.text"), 4)

  def test_a_deferred_import_counts_and_a_type_checking_one_does_not(self):
    # The control for the stage rules: what `imported_anywhere` sees.
    source = pathlib.Path(tempfile.mkdtemp()) / "deferred.py"
    source.write_text(
      "from typing import TYPE_CHECKING\n"
      "if TYPE_CHECKING:\n"
      "  from entangle_jax.testing._ways_in import plugin\n"
      "def f():\n"
      "  from entangle_jax.testing._emitters import text\n"
    )
    modules = module_names()
    self.assertEqual(
      imported_anywhere(source, modules),
      {"entangle_jax.testing._emitters.text"},
    )
    self.assertEqual(imported(source, modules), set())

  def test_a_cycle_is_found(self):
    # The control: the search finds a cycle where there is one.
    self.assertEqual(
      cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"]
    )
    self.assertEqual(cycle({"a": {"b"}, "b": set()}), [])


if __name__ == "__main__":
  absltest.main()
