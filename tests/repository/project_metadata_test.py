"""The version and pins have one source of truth each, and agree with it.

Also checks MODULE.bazel, which no Bazel on these machines can load (4.2.3
has no Bzlmod), against the WORKSPACE path that CI does run: both files are
Starlark calls that Python's parser reads.
"""

import ast
import json
import pathlib
import re
import tomllib

from absl.testing import absltest

import entangle_jax

ROOT = pathlib.Path(__file__).resolve().parents[2]
BAZEL_TOOLS = ROOT / "tools" / "bazel"
# Repositories that every Bazel has, or that this one is.
BUILTIN_REPOSITORIES = {"bazel_tools", "entangle_jax", ""}


def project_version() -> str:
  """The project's version: pyproject.toml's static one, its one source."""
  return _pyproject()["project"]["version"]


def calls(path: pathlib.Path, function: str | None = None) -> list[ast.Call]:
  """The calls in a Starlark file (in `function`'s body, if given)."""
  tree = ast.parse(path.read_text(), filename=str(path))
  if function is not None:
    (tree,) = [
      n
      for n in ast.walk(tree)
      if isinstance(n, ast.FunctionDef) and n.name == function
    ]
  return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def named(found: list[ast.Call], callee: str) -> list[ast.Call]:
  return [c for c in found if ast.unparse(c.func) == callee]


def keyword(call: ast.Call, name: str):
  (value,) = [k.value for k in call.keywords if k.arg == name]
  return ast.literal_eval(value)


def strings(call: ast.Call) -> list[str]:
  return [ast.literal_eval(a) for a in call.args if isinstance(a, ast.Constant)]


def repository(label: str) -> str:
  return label[1:].split("//")[0] if label.startswith("@") else ""


def _pyproject() -> dict:
  return tomllib.loads((ROOT / "pyproject.toml").read_text())


class ProjectMetadataTest(absltest.TestCase):
  def test_version_is_static(self):
    # uv reads a static version without building the package; a dynamic one
    # makes `uv sync` build it in the still empty venv, where mesonpy is
    # missing (no build isolation).
    project = _pyproject()["project"]
    self.assertNotIn("version", project.get("dynamic", []))
    self.assertIsInstance(project["version"], str)

  def test_package_version_is_the_project_version(self):
    self.assertEqual(entangle_jax.__version__, project_version())

  def test_oldest_jax_is_the_ffi_header_pin(self):
    # Compiling against the oldest supported jaxlib's headers is what makes
    # the extension load in every supported jaxlib.
    pin = json.loads((ROOT / "tools" / "xla_ffi_pin.json").read_text())
    project = _pyproject()["project"]
    self.assertIn(f"jax>={pin['jaxlib']}", project["dependencies"])

  def test_test_group_installs_the_export_extra(self):
    # export_test needs what `entangle-jax[export]` installs; the test group
    # repeats those requirements (see pyproject.toml), so they must agree.
    pyproject = _pyproject()
    extra = pyproject["project"]["optional-dependencies"]["export"]
    self.assertNotEmpty(extra)
    for requirement in extra:
      self.assertIn(requirement, pyproject["dependency-groups"]["test"])


class ModuleBazelTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.module = calls(ROOT / "MODULE.bazel")
    self.workspace = calls(ROOT / "WORKSPACE")

  def test_name_is_the_workspace_name(self):
    (module,) = named(self.module, "module")
    (workspace,) = named(self.workspace, "workspace")
    self.assertEqual(keyword(module, "name"), keyword(workspace, "name"))

  def test_version_is_the_project_version(self):
    (module,) = named(self.module, "module")
    self.assertEqual(keyword(module, "version"), project_version())

  def test_bazel_deps_are_the_rule_repositories_with_offline_stand_ins(self):
    deps = {keyword(c, "name") for c in named(self.module, "bazel_dep")}
    # What the BUILD and .bzl files load rules from, besides Bazel itself
    # and this module's own extension repositories.
    extension = self._extension_repositories()
    loaded = set()
    for path in self._starlark_files():
      for load in named(calls(path), "load"):
        loaded.add(repository(strings(load)[0]))
    loaded -= BUILTIN_REPOSITORIES | extension
    self.assertEqual(deps, loaded)
    # And the WORKSPACE path serves each of them offline.
    stand_ins = {
      keyword(c, "name")
      for c in named(
        calls(BAZEL_TOOLS / "offline.bzl"), "native.local_repository"
      )
    }
    self.assertContainsSubset(deps, stand_ins)

  def test_extension_repositories_are_the_ones_the_workspace_path_uses(self):
    # Every repository that the BUILD files name, or that WORKSPACE
    # registers a toolchain from, is brought into scope by use_repo, and is
    # declared by entangle_jax_repositories() in its default setup.
    named_in_build = {
      repository(label)
      for path in self._starlark_files()
      if path.name == "BUILD.bazel"
      for label in re.findall(r'"(@[\w.~-]+//[^"]*)"', path.read_text())
    }
    deps = {keyword(c, "name") for c in named(self.module, "bazel_dep")}
    named_in_build -= BUILTIN_REPOSITORIES | deps
    used = self._extension_repositories(dev=False)
    self.assertEqual(named_in_build, used)
    registered = {
      repository(label)
      for c in named(self.workspace, "register_toolchains")
      for label in strings(c)
    }
    self.assertEqual(self._extension_repositories(dev=True), registered)
    declared = {
      keyword(c, "name")
      for c in calls(
        BAZEL_TOOLS / "repositories.bzl", "entangle_jax_repositories"
      )
      if any(k.arg == "name" for k in c.keywords)
    }
    self.assertContainsSubset(used | registered, declared)

  def test_bazel_default_packages_are_the_runtime_and_test_ones(self):
    # The default Bazel environment installs these from the lock (with what
    # they need): the project's dependencies, the test group and pybind11.
    tree = ast.parse((BAZEL_TOOLS / "repositories.bzl").read_text())
    (value,) = [
      n.value
      for n in tree.body
      if isinstance(n, ast.Assign)
      and [ast.unparse(t) for t in n.targets] == ["DEFAULT_PACKAGES"]
    ]
    pyproject = _pyproject()
    wanted = [
      *pyproject["project"]["dependencies"],
      *pyproject["dependency-groups"]["test"],
      "pybind11",
    ]
    names = {re.split(r"[<>=!~ \[]", w, maxsplit=1)[0] for w in wanted}
    self.assertEqual(set(ast.literal_eval(value)), names)

  def test_the_projects_bazel_tests_get_the_real_libraries(self):
    # WORKSPACE and MODULE.bazel add pyproject.toml's real-libraries group
    # to the project's own Bazel environment: without it, the tests of the
    # shipped bindings' declarations skip under `bazel test //...`, which
    # CI runs as the newest Python's suite (docs/development.md).
    group = _pyproject()["dependency-groups"]["real-libraries"]
    names = {re.split(r"[<>=!~ ;\[]", g, maxsplit=1)[0] for g in group}
    for name in ("WORKSPACE", "MODULE.bazel"):
      tree = ast.parse((ROOT / name).read_text())
      (extra,) = [
        k.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        for k in n.keywords
        if k.arg == "extra_packages"
      ]
      self.assertEqual(set(ast.literal_eval(extra)), names, name)

  def _starlark_files(self) -> list[pathlib.Path]:
    files = [ROOT / "BUILD.bazel", ROOT / "WORKSPACE"]
    for folder in ("benchmarks", "entangle_jax", "native", "tests", "tools"):
      files += (ROOT / folder).rglob("BUILD.bazel")
    files += BAZEL_TOOLS.glob("*.bzl")
    return [f for f in files if f.is_file()]

  def _extension_repositories(self, dev: bool | None = None) -> set[str]:
    # `name = use_extension(...)`: whether each usage is a dev dependency.
    extensions = {}
    for assign in ast.walk(ast.parse((ROOT / "MODULE.bazel").read_text())):
      if isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Call):
        is_dev = any(
          k.arg == "dev_dependency" and ast.literal_eval(k.value)
          for k in assign.value.keywords
        )
        extensions[ast.unparse(assign.targets[0])] = is_dev
    found = set()
    for use in named(self.module, "use_repo"):
      if dev is None or extensions[ast.unparse(use.args[0])] == dev:
        found |= set(strings(use))
    return found


class CcTargetsTest(absltest.TestCase):
  """Each C++ target asks for C++17 itself, not through a .bazelrc.

  Bazel reads only the main workspace's .bazelrc, so a flag there never
  reaches a project that uses entangle_jax as an external repository; there
  Bazel 4's default (-std=c++0x) cannot compile the sources (README,
  "Bazel"). CI also builds both examples with no such flag.
  """

  def test_every_cc_target_under_native_carries_cc_copts(self):
    builds = sorted((ROOT / "native").rglob("BUILD.bazel"))
    self.assertNotEmpty(builds)
    for path in builds:
      found = calls(path)
      with self.subTest(path=path.relative_to(ROOT).as_posix()):
        loads = [strings(c) for c in named(found, "load")]
        self.assertIn(["//tools/bazel:cc.bzl", "CC_COPTS"], loads)
        targets = named(found, "cc_library") + named(found, "cc_binary")
        self.assertNotEmpty(targets)
        for target in targets:
          copts = [
            ast.unparse(k.value) for k in target.keywords if k.arg == "copts"
          ]
          self.assertEqual(copts, ["CC_COPTS"], keyword(target, "name"))


if __name__ == "__main__":
  absltest.main()
