"""The declarations entangle-jax ships for klujax, jax-finufft and mpi4jax:
the table, applying only at a covered installed version, precedence, and
real programs, each with its control: klujax's and jax-finufft's where the
library is installed, mpi4jax's through stored modules (data/README.md)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import pathlib
import re
import sys
import tempfile
import textwrap
from collections.abc import Generator

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax._src.targets import shipped, sources
from entangle_jax._src.targets.declaration import PythonArgument
from entangle_jax.testing._ways_in import command
from tests import test_util
from tests.hand_written_hlo import hlo_module
from tests.temp_project import project
from tools import rule_docs


def calls(*targets: str) -> str:
  """A module with one call per target, all on parameter 0, unordered."""
  lines = ["%p = s32[] parameter(0)"]
  for k, target in enumerate(targets):
    lines.append(
      f'%c{k} = s32[] custom-call(%p), custom_call_target="{target}"'
    )
  return hlo_module("\n".join(lines))


@contextlib.contextmanager
def installed(
  name: str, version: str, entry_points: str = ""
) -> Generator[None]:
  """`name` at `version` looks installed (a ``*.dist-info`` first on
  ``sys.path``, before any real one), with `entry_points` if given."""
  with tempfile.TemporaryDirectory() as site:
    info = pathlib.Path(site) / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
      f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    )
    if entry_points:
      (info / "entry_points.txt").write_text(entry_points)
    sys.path.insert(0, site)
    _forget()
    try:
      yield
    finally:
      sys.path.remove(site)
      _forget()


def _forget() -> None:
  shipped.installed.cache_clear()
  sources._published.cache_clear()


def source_of(text: str, target: str) -> str:
  analysis = testing.OrderAnalysis(text)
  (op, *_) = analysis.select_ops(target)
  assert op.declaration is not None, target
  return op.declaration.source


STATELESS = calls("solve_f64", "solve_c128", "dot_f64")
SHARED_NUMERIC = hlo_module(
  "\n".join(
    [
      "%sym = u64[] parameter(0)",
      "%num = u64[1] parameter(1)",
      "%b = f64[5] parameter(2)",
      *(
        f"%s{k} = f64[5] custom-call(%sym, %num, %b), "
        'custom_call_target="solve_with_numeric_f64"'
        for k in range(2)
      ),
    ]
  )
)
"""Two solves on one numeric handle (operand 1), as klujax calls them."""


class TableTest(absltest.TestCase):
  def test_each_entry_names_its_distribution_range_source_and_reason(self):
    self.assertEqual(
      [b.distribution for b in shipped.BINDINGS],
      ["klujax", "jax-finufft", "mpi4jax"],
    )
    for b in shipped.BINDINGS:
      self.assertTrue(b.repository and b.checked, b.distribution)
      first, last = shipped._release(b.first), shipped._release(b.last)
      assert first is not None and last is not None, b.distribution
      self.assertLessEqual(first, last)
      self.assertTrue(b.covers(b.first) and b.covers(b.last))
      self.assertNotEmpty(b.targets)
      for t in b.targets:
        self.assertTrue(t.read and t.reason, t.pattern)
      for pattern, why in b.undeclared:
        self.assertTrue(pattern and why)
      b.declarations()  # Each is a valid declaration (it would raise).

  def test_the_markdown_lists_every_target(self):
    page = shipped.markdown()
    for b in shipped.BINDINGS:
      for t in b.targets:
        self.assertIn(f"`{t.pattern}`", page)

  def test_the_page_shows_the_table(self):
    page = rule_docs.PAGES["shipped declarations"]
    if not page.is_file():
      self.skipTest("the docs are not in this tree")
    self.assertEqual(
      rule_docs.block_text(page.read_text(), "shipped declarations"),
      shipped.markdown(),
      f"run {rule_docs.COMMAND} to rewrite the page's table",
    )

  def test_the_klujax_numeric_handle_is_operand_1(self):
    entry = next(b for b in shipped.BINDINGS if b.distribution == "klujax")
    solve = next(
      t for t in entry.targets if t.pattern == "solve_with_numeric_f64"
    )
    self.assertEqual((solve.mode, solve.object), ("write", 1))
    # What its user holds: klujax.solve_with_numeric(numeric, b, symbolic).
    self.assertEqual(
      solve.argument,
      PythonArgument("klujax.solve_with_numeric", 0, "numeric"),
    )

  def test_each_klujax_argument_is_the_functions_own(self):
    # Read from the installed klujax.py's source (importing klujax turns
    # on jax_enable_x64 for the whole process): the parameter at each
    # position.
    import ast

    spec = importlib.util.find_spec("klujax")
    if spec is None or spec.origin is None:
      self.skipTest("klujax is not installed (pip install klujax==0.5.2)")
    tree = ast.parse(pathlib.Path(spec.origin).read_text())
    parameters = {
      node.name: [a.arg for a in node.args.args]
      for node in tree.body
      if isinstance(node, ast.FunctionDef)
    }
    entry = next(b for b in shipped.BINDINGS if b.distribution == "klujax")
    named = [t for t in entry.targets if t.argument is not None]
    self.assertLen(named, 14)  # 7 targets, f64 and c128.
    for target in named:
      argument = target.argument
      assert argument is not None
      function = argument.function.split(".", 1)[1]
      self.assertEqual(
        parameters[function][argument.position], argument.name, target.pattern
      )

  def test_the_klujax_fix_names_the_argument(self):
    with installed("klujax", "0.5.2"):
      rendered = testing.format_races(testing.races(SHARED_NUMERIC))
    self.assertIn(
      "argument 0 (`numeric`) of `klujax.solve_with_numeric`", rendered
    )

  def test_versions(self):
    klu = shipped.BINDINGS[0]
    for version in ("0.5.0", "0.5.2", "0.5.2.post1"):
      self.assertTrue(klu.covers(version), version)
    for version in ("0.4.0", "0.5.3", "9.0", "dev"):
      self.assertFalse(klu.covers(version), version)


class AppliesAtCoveredVersionsTest(absltest.TestCase):
  def test_klujax_at_a_covered_version(self):
    with installed("klujax", "0.5.2"):
      self.assertEqual(testing.races(STATELESS), [])
      self.assertLen(testing.races(SHARED_NUMERIC), 1)  # A real race.
      source = source_of(SHARED_NUMERIC, "solve_with_numeric_f64")
      rendered = testing.format_races(testing.races(SHARED_NUMERIC))
    self.assertIn("shipped: klujax 0.5.0\N{EN DASH}0.5.2", source)
    self.assertIn("solve_with_numeric_impl", source)
    self.assertIn(
      "Declarations applied: `solve_with_numeric_f64` (write, object "
      "operand 1; from shipped: klujax",
      rendered,
    )

  def test_the_control_at_uncovered_versions(self):
    for version in ("0.4.0", "9.0"):
      with installed("klujax", version):
        found = testing.races(STATELESS)
        rendered = testing.format_races(found)
      self.assertLen(found, 3, version)  # Today's answer.
      self.assertIn(
        f"klujax {version} is installed; entangle-jax's declarations "
        "cover 0.5.0\N{EN DASH}0.5.2",
        rendered,
      )
      self.assertNotIn("shipped:", rendered)

  def test_jax_finufft(self):
    text = calls("nufft1d1", "nufft2d2f", "nufft3d3")
    with installed("jax-finufft", "1.3.1"):
      self.assertEqual(testing.races(text), [])
    with installed("jax-finufft", "1.2.0"):
      self.assertLen(testing.races(text), 3)  # The control.

  def test_mpi4jax_calls_all_touch_the_process_mpi_state(self):
    text = calls("mpi_allreduce_ffi", "mpi_bcast_ffi")
    with installed("mpi4jax", "0.9.1"):
      (race,) = testing.races(text)
      rendered = testing.format_races([race])
      self.assertIn("shipped: mpi4jax 0.9.1", race.first.declaration.source)
    self.assertNotIn("Undeclared targets", rendered)
    with installed("mpi4jax", "0.8.0"):
      rendered = testing.format_races(testing.races(text))
    self.assertIn("Undeclared targets", rendered)  # The control.
    self.assertIn("mpi4jax 0.8.0 is installed", rendered)


DATA = pathlib.Path(__file__).parent / "data"
MPI4JAX_MODULES = (
  "mpi4jax_rank0_of_1.txt",
  "mpi4jax_rank0_of_2.txt",
  "mpi4jax_rank1_of_2.txt",
)
"""A real mpi4jax 0.9.1 program's optimized HLO under one MPI process and
each rank's under two (made as data/README.md says)."""
MPI4JAX_TARGETS = (
  "mpi_allreduce_ffi",
  "mpi_bcast_ffi",
  "mpi_sendrecv_ffi",
  "mpi_barrier_ffi",
)
MPI4JAX_CALLS = 5
"""The program's calls: allreduce, bcast, sendrecv, barrier, allreduce."""
MPI4JAX_DATA_ORDERED = 1
"""Pairs of them ordered by data alone: sendrecv sends the first
allreduce's result. Each other pair is ordered only by mpi4jax's token."""


def mpi4jax_module(name: str) -> str:
  return (DATA / name).read_text()


def without_token_order(test: absltest.TestCase, text: str) -> str:
  """`text` with each mpi4jax call taking the entry computation's token
  parameter instead of the token the call before it returned: the order
  mpi4jax threads is gone, the calls and their data stay."""
  (entry_token,) = re.findall(r"(%[\w.]+) = token\[\] parameter\(", text)
  cut, count = re.subn(
    r'(custom-call\((?:[^()]*, )?)%[\w.]+(\), custom_call_target="mpi_)',
    rf"\g<1>{entry_token}\g<2>",
    text,
  )
  test.assertEqual(count, MPI4JAX_CALLS)
  return cut


def mpi4jax_sources(text: str) -> list[str | None]:
  """The source of the declaration that decided each mpi4jax call."""
  analysis = testing.OrderAnalysis(text)
  ops = [op for t in MPI4JAX_TARGETS for op in analysis.select_ops(t)]
  assert len(ops) == MPI4JAX_CALLS, ops
  return [op.declaration.source if op.declaration else None for op in ops]


def stored_modules_at(version: str):
  """Each stored mpi4jax module's name, races and per-call declaration
  sources, with mpi4jax `version` installed."""
  for name in MPI4JAX_MODULES:
    text = mpi4jax_module(name)
    with installed("mpi4jax", version):
      yield name, testing.races(text), mpi4jax_sources(text)


class Mpi4jaxModuleTest(absltest.TestCase):
  """mpi4jax builds only against an MPI, which the suite's lanes lack: its
  declarations are checked on the stored module of a real program
  (data/README.md)."""

  def test_its_calls_stay_at_0_pairs_named_by_the_table(self):
    for name, found, decided_by in stored_modules_at("0.9.1"):
      self.assertEqual(found, [], name)
      for source in decided_by:
        self.assertIsNotNone(source, name)
        self.assertStartsWith(source, "shipped: mpi4jax 0.9.1 (", name)
      # Each target by its own name, with how it communicates (the
      # cross-rank check reads that part).
      self.assertIn(
        "Declarations applied: `mpi_allreduce_ffi` (write, communicates: "
        "collective, communicator `comm`, op `op`, same result on every "
        "rank; from shipped: mpi4jax 0.9.1",
        testing.format_races(found),
        name,
      )

  def test_the_control_at_an_uncovered_version(self):
    # Today's answer: mpi4jax's token orders its calls, so still 0 pairs,
    # but no call is declared and the report names no shipped source.
    for name, found, decided_by in stored_modules_at("0.8.0"):
      self.assertEqual(found, [], name)
      self.assertEqual(decided_by, [None] * MPI4JAX_CALLS, name)
      self.assertNotIn("shipped:", testing.format_races(found), name)

  def test_the_control_without_the_token_order(self):
    # The same calls with the token order cut: each pair not ordered by
    # data races, declared (every call writes the process's MPI state) at
    # the covered version, and undeclared with the version note at another.
    pairs = MPI4JAX_CALLS * (MPI4JAX_CALLS - 1) // 2 - MPI4JAX_DATA_ORDERED
    for name in MPI4JAX_MODULES:
      text = without_token_order(self, mpi4jax_module(name))
      with installed("mpi4jax", "0.9.1"):
        found = testing.races(text)
      self.assertLen(found, pairs, name)
      for race in found:
        for op in (race.first, race.second):
          assert op.declaration is not None, name
          self.assertStartsWith(op.declaration.source, "shipped: mpi4jax")
      self.assertNotIn("Undeclared targets", testing.format_races(found))
      with installed("mpi4jax", "0.8.0"):
        found = testing.races(text)
        rendered = testing.format_races(found)
      self.assertLen(found, pairs, name)
      self.assertIn("Undeclared targets", rendered)
      self.assertIn(
        "mpi4jax 0.8.0 is installed; entangle-jax's declarations cover 0.9.1",
        rendered,
      )


def scratch(test: absltest.TestCase) -> pathlib.Path:
  """A folder removed when `test` ends."""
  folder = tempfile.TemporaryDirectory()
  test.addCleanup(folder.cleanup)
  return pathlib.Path(folder.name)


def note(version: str) -> str:
  """The start of the note for klujax installed at `version`."""
  return (
    f"klujax {version} is installed; entangle-jax's declarations cover "
    "0.5.0\N{EN DASH}0.5.2"
  )


class VersionNoteTest(absltest.TestCase):
  """The note on a binding installed at a version the table does not
  cover is data of the findings (`Run.version_notes`), in every format."""

  def check(self, text: str, *argv: str) -> tuple[int, str]:
    """The command on one module file holding `text`: status, stdout."""
    folder = scratch(self)
    module = folder / "module_0001.jit_program.cpu_after_optimizations.txt"
    module.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    status = command.main([str(module), *argv], out=out, err=err)
    return status, out.getvalue()

  def every_format(self, text: str) -> tuple[list[str], list[str], list[str]]:
    """The command's lines in text, its JSON's version notes, and its
    GitHub warnings, for a module holding `text`; each format exits 1, and
    SARIF says the notes as warnings too."""
    answers = {f: self.check(text, "--format", f) for f in command.FORMATS}
    self.assertEqual({status for status, _ in answers.values()}, {1})
    notes = json.loads(answers["json"][1])["version_notes"]
    (run,) = json.loads(answers["sarif"][1])["runs"]
    warned = [
      n["message"]["text"]
      for n in run["invocations"][0].get("toolExecutionNotifications", [])
      if n["level"] == "warning"
    ]
    self.assertEqual(warned, notes)
    return (
      answers["text"][1].splitlines(),
      notes,
      [
        a
        for a in answers["github"][1].splitlines()
        if a.startswith("::warning")
      ],
    )

  def test_the_command_says_it_in_every_format(self):
    with installed("klujax", "0.4.0"):
      lines, notes, warnings = self.every_format(STATELESS)
    (said,) = notes
    self.assertTrue(said.startswith(note("0.4.0")), said)
    # Text: the run's notes, just before the summary (once more than the
    # module's own report, which says it with its undeclared targets).
    self.assertEqual(lines[-2], said)
    self.assertEqual(lines.count(said), 1)
    self.assertEqual(lines.count(f"  {said}"), 1)
    (warning,) = warnings
    self.assertIn("title=entangle-jax declarations not applied::", warning)
    self.assertTrue(warning.endswith(f"::{said}"), warning)

  def test_the_control_pairs_of_other_targets_have_no_note(self):
    # The same uncovered klujax installed, but the pairs are of targets
    # that are not klujax's: they race as before, and nothing is noted.
    with installed("klujax", "0.4.0"):
      lines, notes, warnings = self.every_format(calls("my_solve", "my_dot"))
    self.assertEqual((notes, warnings), ([], []))
    self.assertFalse([line for line in lines if "klujax" in line])


class PrecedenceTest(absltest.TestCase):
  def test_an_entry_point_beats_the_table_and_pyproject_beats_both(self):
    where = tempfile.TemporaryDirectory()
    self.addCleanup(where.cleanup)
    module = pathlib.Path(where.name) / "klu_own.py"
    module.write_text(
      "DECLARATIONS = {'targets': {'dot_f64': {'mode': 'write'},"
      " 'solve_f64': {'mode': 'write'}}}\n"
    )
    sys.path.insert(0, str(module.parent))
    try:
      with installed(
        "klujax",
        "0.5.2",
        f"[{sources.ENTRY_POINT_GROUP}]\nklujax = klu_own:DECLARATIONS\n",
      ):
        self.assertIn("entry point klujax", source_of(STATELESS, "dot_f64"))
        self.assertIn("shipped: klujax", source_of(STATELESS, "solve_c128"))
        self.assertLen(testing.races(STATELESS), 1)  # Both may write.
        with project('[tool.entangle-jax.targets."solve_f64"]\nmode="none"\n'):
          self.assertIn("pyproject.toml", source_of(STATELESS, "solve_f64"))
          self.assertEqual(testing.races(STATELESS), [])
    finally:
      sys.path.remove(str(module.parent))
      sys.modules.pop("klu_own", None)
    with installed("klujax", "0.5.2"):
      self.assertEqual(testing.races(STATELESS), [])  # The control.


PLUGIN_SUITE = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  import klujax


  def test_solves():
    ai = jnp.arange(5, dtype=jnp.int32)

    def program(ax, b):
      return klujax.solve(ai, ai, ax, b), klujax.dot(ai, ai, ax, b)

    jax.jit(program)(jnp.ones(5), jnp.ones(5))
  """
)


def _have(module: str) -> bool:
  return importlib.util.find_spec(module) is not None


@absltest.skipUnless(
  _have("klujax"), "klujax is not installed (pip install klujax==0.5.2)"
)
class KlujaxProgramTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    import jax
    import jax.numpy as jnp

    # klujax's first import turns on jax_enable_x64 for the whole process
    # (its handles are 64-bit): on for these tests, then put back, so that
    # the tests after them run as they would alone.
    self.addCleanup(
      jax.config.update, "jax_enable_x64", jax.config.read("jax_enable_x64")
    )
    importlib.import_module("klujax")
    jax.config.update("jax_enable_x64", True)

    self.jnp = jnp
    self.ai = jnp.arange(5, dtype=jnp.int32)
    self.ax = jnp.ones(5)
    self.b = jnp.ones(5)
    if not shipped.BINDINGS[0].covers(_version("klujax")):
      self.skipTest(f"klujax {_version('klujax')} is not a covered version")

  def test_stateless_solves_and_dot(self):
    import jax

    klujax = importlib.import_module("klujax")  # Not under Bazel.

    ai = self.ai

    def program(ax, b):
      return (
        klujax.solve(ai, ai, ax, b),
        klujax.solve(ai, ai, 2 * ax, b),
        klujax.dot(ai, ai, ax, b),
      )

    compiled = jax.jit(program).lower(self.ax, self.b).compile()
    self.assertEqual(testing.races(compiled), [])
    with installed("klujax", "0.4.0"):
      self.assertLen(testing.races(compiled), 3)  # The control.

  def test_two_solves_on_one_numeric_handle_race(self):
    import jax

    klujax = importlib.import_module("klujax")  # Not under Bazel.

    jnp = self.jnp
    symbolic = klujax.analyze(self.ai, self.ai, 5)
    numeric = klujax.factor(self.ai, self.ai, self.ax, symbolic)
    num = jnp.array(numeric.as_list(), dtype=jnp.uint64)
    sym = jnp.array(symbolic.raw, dtype=jnp.uint64)

    def program(b, num, sym):
      return (
        klujax.solve_with_numeric(num, b, sym),
        klujax.solve_with_numeric(num, 2 * b, sym),
      )

    compiled = jax.jit(program).lower(self.b, num, sym).compile()
    (race,) = testing.races(compiled)
    self.assertEqual(race.first.declaration.object, 1)
    with installed("klujax", "0.4.0"):
      self.assertLen(testing.races(compiled), 1)  # The control.

  def test_the_plugins_summary_notes_an_uncovered_version(self):
    # Stateless calls, with an uncovered klujax in front of the installed
    # one: today's race, and the note in the run's summary. (At the
    # installed version they give 0 pairs, test_stateless_solves_and_dot;
    # races of other targets get no note, VersionNoteTest: the controls.)
    root = scratch(self)
    (root / "test_solves.py").write_text(PLUGIN_SUITE)
    with installed("klujax", "0.4.0"):
      # Its kept dump in a folder removed after the test, not on /dev/shm.
      run = test_util.pytest_run(
        root, "--entangle-races=report", TMPDIR=str(scratch(self))
      )
    self.assertEqual(run.returncode, 0, run.stdout[-3000:])
    summary = run.stdout.split("entangle-jax race check", 1)[1]
    self.assertIn("1 with races", summary)
    self.assertIn(note("0.4.0"), summary)


@absltest.skipUnless(
  _have("jax_finufft"),
  "jax-finufft is not installed (pip install jax-finufft==1.3.1)",
)
class JaxFinufftProgramTest(absltest.TestCase):
  def test_three_transforms(self):
    import jax
    import jax.numpy as jnp

    finufft = importlib.import_module("jax_finufft")  # Not under Bazel.
    nufft1, nufft2, nufft3 = finufft.nufft1, finufft.nufft2, finufft.nufft3

    if not shipped.BINDINGS[1].covers(_version("jax-finufft")):
      self.skipTest("jax-finufft is installed at a version not covered")
    x = jnp.linspace(-3.0, 3.0, 20)
    c = jnp.ones(20, dtype=jnp.result_type(x.dtype, jnp.complex64))
    s = jnp.linspace(-2.0, 2.0, 10)

    def program(x, c, s):
      return nufft1(16, c, x), nufft2(jnp.ones(16, c.dtype), x), nufft3(c, x, s)

    compiled = jax.jit(program).lower(x, c, s).compile()
    self.assertEqual(testing.races(compiled), [])
    with installed("jax-finufft", "1.2.0"):
      self.assertLen(testing.races(compiled), 3)  # The control.


def _version(name: str) -> str:
  return importlib.metadata.version(name)


if __name__ == "__main__":
  absltest.main()
