"""No module of ``entangle_jax`` keeps a table that running a program
writes, other than the caches, warn-once sets, registries and the
sanitizer's recordings listed here (issue 59, item 2).

A module-level table written at run time makes an answer depend on what
ran before it in the process: the race report once stopped offering
``in_program_order`` for a primitive after the transform had raised for
it (``targets.names.UNORDERABLE_PRIMITIVES``), so a fresh process and a
test suite said different things of one module. What a check says must
come from the data it is handed. The scan is static: it finds every
write, on the paths a test exercises or not.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import unittest

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "entangle_jax"

_CACHE = "a cache: a pure function's answers by their whole input"
_KINDS = (
  "a cache: which kinds of JAX's own primitives (plain parameters, "
  "operand dtypes and ranks) lowered to no native call"
)
_WARNED = "warn-once: what is warned, never what is answered"
_REGISTRY = "a registry that the user's (or a rule module's) own call fills"
_ONCE = "done once per process, as what it sets up (XLA's, JAX's) is"
_WATCH = "the dump watch's count of this process's compiles and dumps"
_CORE = "entangle_jax._src"
_ORDER = f"{_CORE}.program_order"
_TESTING = "entangle_jax.testing"

ALLOWED: dict[tuple[str, str], str] = {
  ("entangle_jax", "_registered"): _ONCE,
  (f"{_ORDER}.natives", "_FROM_LOWERING"): _CACHE,
  (f"{_ORDER}.natives", "_WARNED"): _WARNED,
  (f"{_ORDER}.natives", "_NO_NATIVE_KINDS"): _KINDS,
  (f"{_ORDER}.natives", "_ONE"): _CACHE,
  (f"{_ORDER}.api", "_DECLARATIONS"): _CACHE,
  (f"{_ORDER}.lowered", "_CACHE"): _CACHE,
  (f"{_ORDER}.lowered", "_BY_EQN"): _CACHE,
  (f"{_ORDER}.lowered", "_JAX_OWN"): _CACHE,
  (f"{_ORDER}.lowered", "_SCANNED"): _CACHE,
  (f"{_ORDER}.lowered", "_NOT_OWN"): _CACHE,
  (f"{_ORDER}.rules.registry", "RULES"): _REGISTRY,
  (f"{_ORDER}.rules.registry", "FAMILIES"): _REGISTRY,
  (f"{_ORDER}.rules.registry", "CARRIERS"): _REGISTRY,
  (f"{_CORE}.targets.in_code", "DECLARED"): _REGISTRY,
  (f"{_TESTING}._hlo.module_text", "_TEXTS"): _CACHE,
  (f"{_TESTING}._hlo.module_text", "_BEFORE"): _CACHE,
  (f"{_TESTING}._ways_in.module_files", "_LISTED"): _CACHE,
  (f"{_TESTING}._analysis.source_lines", "_marked"): _REGISTRY,
  (f"{_TESTING}._ways_in.dump_watch", "_listening"): _ONCE,
  (f"{_TESTING}._ways_in.dump_watch", "_counts"): _WATCH,
  (f"{_TESTING}._ways_in.dump_watch", "_OWN"): _WATCH,
}
"""The tables (and flags) that may be written after import, each with why
its writes cannot change what a check says of the data it is handed."""

SANITIZER = f"{_TESTING}._sanitize"
"""The run-time sanitizer: what it records of a run is its subject."""

_MUTABLE_CALLS = frozenset(
  {
    "dict",
    "list",
    "set",
    "bytearray",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "deque",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
  }
)
"""Calls that make a mutable table (by the name called, ``collections.``
or ``weakref.`` in front or not)."""

_MUTATORS = frozenset(
  {
    "add",
    "append",
    "appendleft",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
    "__setitem__",
    "__delitem__",
  }
)
"""The methods that change a dict, list, set or deque in place."""


def _is_mutable(value: ast.expr) -> bool:
  containers = ast.Dict | ast.List | ast.Set
  if isinstance(value, containers | ast.DictComp | ast.ListComp | ast.SetComp):
    return True
  if isinstance(value, ast.Call):
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else None
    if isinstance(func, ast.Name):
      name = func.id
    return name in _MUTABLE_CALLS
  return False


def tables(tree: ast.Module) -> set[str]:
  """The names a module binds to a mutable table at its top level."""
  found = set()
  for node in tree.body:
    if isinstance(node, ast.Assign):
      targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
      targets, value = [node.target], node.value
    else:
      continue
    if _is_mutable(value):
      found |= {t.id for t in targets if isinstance(t, ast.Name)}
  return found


@dataclasses.dataclass(frozen=True)
class Write:
  """A write, inside a function, to a module-level table."""

  table: tuple[str, str]  # (module, name)
  where: str  # path:line

  def __str__(self) -> str:
    return f"{self.table[0]}.{self.table[1]} written at {self.where}"


class Scan:
  """The package's module-level tables, and the writes to them that its
  functions make.

  A table is named directly (``_CACHE[k] = v``), through its module
  (``names.TABLE.setdefault(...)``) or imported by name; ``global`` in a
  function rebinds a module's name. A table handed on under another name
  (``cache = _CACHE``, then ``cache[k] = v``) is not followed."""

  def __init__(self, sources: dict[str, tuple[str, str]]):
    """`sources`: by module name, its file's path (as reported) and text
    (``__init__`` files named ``.../__init__.py``)."""
    self.trees = {m: ast.parse(text) for m, (_, text) in sources.items()}
    self.paths = {m: path for m, (path, _) in sources.items()}
    self.tables = {m: tables(t) for m, t in self.trees.items()}
    self.packages = {
      m for m, path in self.paths.items() if path.endswith("__init__.py")
    }

  def writes(self) -> list[Write]:
    found = []
    for module, tree in self.trees.items():
      found += self._writes_in(module, tree)
    return found

  def _resolve(self, module: str, tree: ast.Module):
    """What `module`'s names stand for: package modules (by local name)
    and tables (by local name: (module, name))."""
    modules: dict[str, str] = {}
    named = {n: (module, n) for n in self.tables[module]}
    package = module if module in self.packages else module.rpartition(".")[0]
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          if alias.asname and alias.name in self.tables:
            modules[alias.asname] = alias.name
      elif isinstance(node, ast.ImportFrom):
        source = node.module or ""
        if node.level:
          base = package.split(".")
          base = base[: len(base) - node.level + 1]
          source = ".".join([*base, source] if source else base)
        for alias in node.names:
          local = alias.asname or alias.name
          if f"{source}.{alias.name}" in self.tables:
            modules[local] = f"{source}.{alias.name}"
          elif alias.name in self.tables.get(source, ()):
            named[local] = (source, alias.name)
    return modules, named

  def _writes_in(self, module: str, tree: ast.Module) -> list[Write]:
    """The writes `module`'s functions make (what a module runs when
    imported is written before anything runs a program)."""
    modules, named = self._resolve(module, tree)

    def table_of(node: ast.expr, local: set[str]) -> tuple[str, str] | None:
      if isinstance(node, ast.Name) and node.id not in local:
        return named.get(node.id)
      if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = modules.get(node.value.id)
        shadowed = node.value.id in local
        if (
          owner is not None and not shadowed and node.attr in self.tables[owner]
        ):
          return (owner, node.attr)
      return None

    found = []
    for function in ast.walk(tree):
      if not isinstance(
        function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
      ):
        continue
      local = _locals(function)
      for node in ast.walk(function):
        table = None
        if isinstance(node, ast.Subscript) and isinstance(
          node.ctx, ast.Store | ast.Del
        ):
          table = table_of(node.value, local)
        elif isinstance(node, ast.Call) and isinstance(
          node.func, ast.Attribute
        ):
          if node.func.attr in _MUTATORS:
            table = table_of(node.func.value, local)
        elif isinstance(node, ast.AugAssign):
          table = table_of(node.target, local)
        elif isinstance(node, ast.Global):
          found += [
            Write((module, name), f"{self.paths[module]}:{node.lineno}")
            for name in node.names
          ]
        if table is not None and isinstance(node, ast.expr | ast.stmt):
          found.append(Write(table, f"{self.paths[module]}:{node.lineno}"))
    return found


def _locals(function: ast.AST) -> set[str]:
  """The names a function binds itself (arguments, assignments), unless it
  declares them ``global``: those hide the module's."""
  declared = {
    n
    for node in ast.walk(function)
    if isinstance(node, ast.Global)
    for n in node.names
  }
  bound = set()
  args = getattr(function, "args", None)
  if args is not None:
    every = (*args.posonlyargs, *args.args, *args.kwonlyargs)
    bound |= {a.arg for a in every}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
  for node in ast.walk(function):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      bound.add(node.id)
  return bound - declared


def package_sources() -> dict[str, tuple[str, str]]:
  """Every module of the package: by dotted name, its path and text."""
  found = {}
  for path in PACKAGE.rglob("*.py"):
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    where = str(path.relative_to(ROOT))
    found[".".join(parts)] = (where, path.read_text())
  return found


class ModuleStateTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    # Once for the class, not once a test: the scan parses every module of
    # the package (6 to 7 s of each test's time here, under load).
    super().setUpClass()
    if not PACKAGE.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")
    cls.writes = Scan(package_sources()).writes()

  def test_no_table_is_written_after_import_but_those_allowed(self):
    unexpected = [
      str(w)
      for w in self.writes
      if w.table not in ALLOWED and not w.table[0].startswith(SANITIZER)
    ]
    self.assertEqual(unexpected, [])

  def test_every_allowed_table_is_still_written(self):
    # The list names only what exists: a table gone, or no longer
    # written after import, leaves it.
    written = {w.table for w in self.writes}
    self.assertEqual(sorted(set(ALLOWED) - written), [])

  def test_the_scan_finds_the_table_issue_59_removed(self):
    # The control, as the code was: the transform wrote the race report's
    # table through the module that holds it.
    sources = {
      "entangle_jax._src.targets.names": (
        "names.py",
        "UNORDERABLE_PRIMITIVES: dict[str, str] = {}\n",
      ),
      "entangle_jax._src.program_order.interpreter": (
        "interpreter.py",
        "from entangle_jax._src.targets import names\n"
        "def native(eqn, why):\n"
        "  names.UNORDERABLE_PRIMITIVES.setdefault(eqn, why)\n",
      ),
    }
    (write,) = Scan(sources).writes()
    self.assertEqual(
      str(write),
      "entangle_jax._src.targets.names.UNORDERABLE_PRIMITIVES written at "
      "interpreter.py:3",
    )

  def test_a_local_of_the_same_name_is_no_table(self):
    sources = {
      "m": ("m.py", "CACHE = {}\ndef f(CACHE):\n  CACHE[1] = 2\n"),
      "n": ("n.py", "from m import CACHE\ndef g():\n  CACHE.clear()\n"),
    }
    self.assertEqual(
      [str(w) for w in Scan(sources).writes()], ["m.CACHE written at n.py:3"]
    )


if __name__ == "__main__":
  absltest.main()
