"""Races that XLA's optimizer hides: the check compares the program's order
(the module before optimization) with the module XLA optimized.

Each shape runs too, with the example store: where the optimized module
shows that XLA moved or merged the call, the wrong value it computes is
asserted, and its fix, applied as the report says, computes the right one
with no pair left. What a run of the hoisted loop printed on jax 0.10.2:

    plain        [0.0, 0.0, 0.0, 0.0]   (7 writes of 0..6, then reads: 21.0)
    report's fix [21.0, 21.0, 21.0, 21.0]
"""

import dataclasses
import io
import pathlib
import shutil
import tempfile
import textwrap

import jax
import jax.numpy as jnp
from absl.testing import absltest, parameterized
from jax import lax

from entangle_jax import entangle, in_program_order
from entangle_jax._src.targets import sources
from entangle_jax.testing import (
  OrderAnalysis,
  format_races,
  module_text,
  races,
  read_slot,
  reset_slots,
  write_slot,
)
from entangle_jax.testing._analysis import xla_changes
from entangle_jax.testing._ways_in import command, module_files
from tests import preloaded_child, test_util
from tests.hand_written_hlo import read_then_write

STEPS = 7
RIGHT_SUM = float(sum(range(STEPS)))  # Each step reads what it wrote.


def write_then_read_in_loop(slot):
  """The read takes the slot, not the write's result: nothing orders it."""

  def body(i, total):
    write_slot(slot, i.astype(jnp.float32))
    return total + read_slot(slot)

  return lax.fori_loop(0, STEPS, body, 0.0)


def write_then_read_in_loop_fixed(slot):
  """The report's fix: the read consumes the write's result."""

  def body(i, total):
    token = write_slot(slot, i.astype(jnp.float32))
    return total + read_slot(token)

  return lax.fori_loop(0, STEPS, body, 0.0)


def scan_closure(slot):
  """The slot as a closure of a scan's body."""

  def body(total, x):
    write_slot(slot, x)
    return total + read_slot(slot), None

  return lax.scan(body, 0.0, jnp.arange(STEPS, dtype=jnp.float32))[0]


def read_then_write_in_loop(slot):
  """Each iteration reads, then writes after its read; the next
  iteration's read takes the slot again, not the write's result."""

  def body(i, total):
    value = read_slot(slot)
    write_slot(entangle(slot, value), (i + 1).astype(jnp.float32))
    return total + value

  return lax.fori_loop(0, STEPS, body, 0.0)


def read_then_write_in_loop_fixed(slot):
  """The report's fix: the loop carries the write's result to the next
  iteration's read."""

  def body(i, carry):
    total, token = carry
    value = read_slot(token)
    token = write_slot(entangle(token, value), (i + 1).astype(jnp.float32))
    return total + value, token

  return lax.fori_loop(0, STEPS, body, (0.0, slot))[0]


def constant_slot(unused):
  """The slot a constant of the module."""
  del unused
  return write_then_read_in_loop(jnp.int32(5))


def query_update_query(handle):
  """A query, an update ordered after it, the same query again on the
  handle: XLA's CSE may merge the two queries."""
  token = write_slot(handle, 1.0)
  first = read_slot(token)
  write_slot(entangle(token, first), 2.0)
  second = read_slot(token)
  return first, second


def query_update_query_fixed(handle):
  """The fix: the second query consumes the update's result."""
  token = write_slot(handle, 1.0)
  first = read_slot(token)
  token = write_slot(entangle(token, first), 2.0)
  second = read_slot(token)
  return first, second


def _runs(fn, arg, times=4):
  values = []
  for _ in range(times):
    reset_slots()
    values.append(jax.tree.map(float, fn(arg)))
  return values


def _kinds(found):
  return [r.xla_change.kind for r in found if r.xla_change is not None]


class HoistedReadTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("argument", write_then_read_in_loop),
    ("scan_closure", scan_closure),
    ("constant", constant_slot),
  )
  def test_a_read_in_a_loop_is_reported(self, program):
    jitted = jax.jit(program)
    lowered = jitted.lower(jnp.int32(3))
    found = races(lowered)
    self.assertLen(found, 1, format_races(found))
    race = found[0]
    self.assertEqual(
      {race.first.target, race.second.target},
      {test_util.WRITE, test_util.READ},
    )
    report = format_races(found)
    if race.xla_change.kind == "hoisted":
      # XLA moved the read out of the loop: every run reads before every
      # write, so the sum is wrong in every run.
      self.assertIn("out of its loop", report)
      self.assertIn("[EJ008]", report)
      for value in _runs(jitted, jnp.int32(3)):
        self.assertNotEqual(value, RIGHT_SUM)
    # The optimized module alone shows no pair, and says what it cannot see.
    compiled_only = races(lowered.compile())
    if race.xla_change.kind == "hoisted":
      self.assertEqual(compiled_only, [])
    self.assertEqual(compiled_only.unseen, xla_changes.NOT_SEEN)
    self.assertIn(xla_changes.NOT_SEEN, format_races(compiled_only))

  def test_the_fix_as_reported_computes_the_right_sum(self):
    jitted = jax.jit(write_then_read_in_loop_fixed)
    self.assertEqual(races(jitted.lower(jnp.int32(3))), [])
    self.assertEqual(_runs(jitted, jnp.int32(3)), [RIGHT_SUM] * 4)

  def test_in_program_order_as_reported(self):
    found = races(jax.jit(write_then_read_in_loop).lower(jnp.int32(3)))
    self.assertIn(
      "in_program_order(write_then_read_in_loop)", format_races(found)
    )
    jitted = jax.jit(in_program_order(write_then_read_in_loop))
    self.assertEqual(races(jitted.lower(jnp.int32(3))), [])
    self.assertEqual(_runs(jitted, jnp.int32(3)), [RIGHT_SUM] * 4)

  def test_outside_a_loop_the_pair_is_the_optimized_modules(self):
    def straight(slot):
      write_slot(slot, 1.0)
      return read_slot(slot)

    found = races(jax.jit(straight).lower(jnp.int32(3)))
    self.assertLen(found, 1)
    self.assertIsNone(found[0].xla_change)  # Not hidden: seen as it runs.


class AcrossIterationsTest(absltest.TestCase):
  """One iteration's read is ordered after the write of the iteration
  before only by the loop: a read XLA moved out of it loses that."""

  def test_a_read_moved_out_of_the_loop_races_with_its_writes(self):
    jitted = jax.jit(read_then_write_in_loop)
    lowered = jitted.lower(jnp.int32(3))
    found = races(lowered)
    analysis = OrderAnalysis(lowered)
    if not found:
      # Control: XLA kept the read in the loop; the loop orders it.
      self.assertEqual(analysis.races(), [])
      self.assertEqual(_runs(jitted, jnp.int32(3)), [RIGHT_SUM] * 4)
      return
    self.assertEqual(_kinds(found), ["hoisted"])
    (race,) = found
    self.assertEqual(race.first.target, test_util.WRITE)
    self.assertEqual(race.second.target, test_util.READ)
    # Within one iteration the program orders them, and XLA kept no pair.
    self.assertEqual(races(lowered.compile()), [])
    for value in _runs(jitted, jnp.int32(3)):
      self.assertNotEqual(value, RIGHT_SUM)

  def test_the_fix_as_reported_carries_the_write(self):
    jitted = jax.jit(read_then_write_in_loop_fixed)
    self.assertEqual(races(jitted.lower(jnp.int32(3))), [])
    self.assertEqual(_runs(jitted, jnp.int32(3)), [RIGHT_SUM] * 4)

  def test_in_program_order_as_reported(self):
    jitted = jax.jit(in_program_order(read_then_write_in_loop))
    self.assertEqual(races(jitted.lower(jnp.int32(3))), [])
    self.assertEqual(_runs(jitted, jnp.int32(3)), [RIGHT_SUM] * 4)


class MergedQueryTest(absltest.TestCase):
  def test_a_merged_query_is_reported(self):
    jitted = jax.jit(query_update_query)
    lowered = jitted.lower(jnp.int32(2))
    found = races(lowered)
    self.assertIn("merged", _kinds(found), format_races(found))
    merged = [
      r for r in found if r.xla_change and r.xla_change.kind == "merged"
    ]
    # The second query, at its own line, is the call XLA merged away.
    self.assertEqual(merged[0].xla_change.call.target, test_util.READ)
    self.assertIn("merged", format_races(found))
    compiled = module_text(lowered.compile())
    if compiled.count(f'custom_call_target="{test_util.READ}"') == 1:
      # One query left: the second reads before the update in every run.
      for _, second in _runs(jitted, jnp.int32(2)):
        self.assertEqual(second, 1.0)

  def test_the_fix_reads_the_update(self):
    jitted = jax.jit(query_update_query_fixed)
    self.assertEqual(races(jitted.lower(jnp.int32(2))), [])
    self.assertEqual(_runs(jitted, jnp.int32(2)), [(1.0, 2.0)] * 4)

  def test_in_program_order_reads_the_update(self):
    jitted = jax.jit(in_program_order(query_update_query))
    self.assertEqual(races(jitted.lower(jnp.int32(2))), [])
    self.assertEqual(_runs(jitted, jnp.int32(2)), [(1.0, 2.0)] * 4)


class ProgramModuleTest(absltest.TestCase):
  def test_a_helper_s_calls_get_the_callers_scope_and_lines(self):
    lowered = jax.jit(write_then_read_in_loop).lower(jnp.int32(3))
    analysis = OrderAnalysis(lowered)
    program = analysis.program()
    assert program is not None
    optimized = {
      xla_changes.call_key(op) for op in analysis.user_native_calls()
    }
    before = {xla_changes.call_key(op) for op in program.user_native_calls()}
    # The write stays in the loop: the same call in both modules.
    write = [key for key in before if key[0] == test_util.WRITE]
    self.assertLen(write, 1)
    self.assertIn(write[0], optimized)
    scopes = {op.scope for op in program.user_native_calls()}
    self.assertTrue(
      all(s.startswith("jit(write_then_read_in_loop)/") for s in scopes)
    )

  def test_text_without_its_program_says_what_it_cannot_see(self):
    lowered = jax.jit(write_then_read_in_loop).lower(jnp.int32(3))
    optimized = module_text(lowered.compile())
    self.assertEqual(races(optimized).unseen, xla_changes.NOT_SEEN)
    before = lowered.as_text(dialect="hlo", debug_info=True)
    assert isinstance(before, str)
    analysis = OrderAnalysis(optimized, before_optimization=before)
    found = analysis.races()
    self.assertIsNone(found.unseen)
    self.assertLen(found, 1)

  def test_before_optimization_must_be_text(self):
    with self.assertRaisesRegex(TypeError, "before_optimization must be"):
      OrderAnalysis(
        "HloModule m, is_scheduled=true",
        before_optimization=3,  # ty: ignore[invalid-argument-type]
      )


# A read of the slot, then a write of it: in the program unordered (the
# control: ordered), and in an optimized module the write depends on the
# read (`hand_written_hlo.read_then_write`).
PROGRAM_LEAVES_UNORDERED = read_then_write(
  test_util.READ, test_util.WRITE, "%x", optimized=False
)
PROGRAM_ORDERS = read_then_write(
  test_util.READ, test_util.WRITE, "%r", optimized=False
)
ORDERED_BY_XLA = read_then_write(
  test_util.READ, test_util.WRITE, "%r", optimized=True
)


class OneSourceLineTest(absltest.TestCase):
  """Modules whose ops carry only their innermost frame (jax 0.6's
  ``source_file``/``source_line``; data/source_line_metadata): a
  wrapper's calls share that line, so a call of the program is named by
  its scope too."""

  DATA = (
    pathlib.Path(__file__).resolve().parent / "data" / "source_line_metadata"
  )

  def races(self) -> list[tuple[str, str]]:
    before, after = (
      (self.DATA / f"loop.{name}.txt").read_text()
      for name in ("before_optimizations", "cpu_after_optimizations")
    )
    found = OrderAnalysis(after, before_optimization=before).races()
    return sorted((r.first.scope, r.second.scope) for r in found)

  def test_a_read_in_the_loop_and_one_after_it_are_two_calls(self):
    # Both reads are made at example_store.py's one line. The read after
    # the loop races the write after it (the optimized module shows it);
    # the read in the loop is ordered before that write only through the
    # loop, which XLA may unroll. Named by the line alone, the two reads
    # were one call, and the second pair was taken for the first.
    self.assertEqual(
      self.races(),
      [
        ("jit(loop)/jit(main)/ffi_call", "jit(loop)/jit(main)/ffi_call"),
        (
          "jit(loop)/jit(main)/while/body/ffi_call",
          "jit(loop)/jit(main)/ffi_call",
        ),
      ],
    )

  def test_control_calls_with_whole_stacks_are_named_by_them(self):
    i = (
      OrderAnalysis(
        (self.DATA / "loop.cpu_after_optimizations.txt").read_text()
      )
      .user_native_calls()[0]
      .instruction
    )
    one_line = xla_changes.call_key(i)
    self.assertIn(i.op_name, one_line)
    whole = dataclasses.replace(i, stack=(*i.stack, ("loop.py", 9)))
    self.assertEqual(xla_changes.call_key(whole), (i.target, whole.stack))


class OrderedByXlaTest(absltest.TestCase):
  def test_an_order_only_xla_chose_is_reported(self):
    found = OrderAnalysis(
      ORDERED_BY_XLA, before_optimization=PROGRAM_LEAVES_UNORDERED
    ).races()
    self.assertLen(found, 1)
    change = found[0].xla_change
    assert change is not None
    self.assertEqual(change.kind, "ordered")
    self.assertIsNone(change.call)
    self.assertIn("the order is XLA's choice", format_races(found))
    self.assertIn("[EJ008]", format_races(found))
    # The optimized module alone shows no pair, and says what it cannot
    # see.
    alone = races(ORDERED_BY_XLA)
    self.assertEqual(list(alone), [])
    self.assertEqual(alone.unseen, xla_changes.NOT_SEEN)

  def test_control_a_program_that_orders_them_has_no_pair(self):
    found = OrderAnalysis(
      ORDERED_BY_XLA, before_optimization=PROGRAM_ORDERS
    ).races()
    self.assertEqual(list(found), [])


class TwoBackendsInOneDumpTest(absltest.TestCase):
  def test_each_module_finds_its_own_module_before_optimization(self):
    """XLA numbers each backend's modules apart: a TPU program's
    module_0070 and a CPU one's lie in one dump folder (as the TPU check's
    dump has them), and each is paired with its own program."""
    folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    files = {
      "module_0070.jit_a.cpu_after_optimizations.txt": ORDERED_BY_XLA,
      "module_0070.jit_a.before_optimizations.txt": PROGRAM_LEAVES_UNORDERED,
      "module_0070.jit_b.cl_9.after_optimizations.txt": ORDERED_BY_XLA,
      "module_0070.jit_b.cl_9.before_optimizations.txt": PROGRAM_ORDERS,
    }
    for name, text in files.items():
      (folder / name).write_text(text)
    declarations = sources.current()
    a = module_files.check_module(
      folder / "module_0070.jit_a.cpu_after_optimizations.txt", declarations
    )
    b = module_files.check_module(
      folder / "module_0070.jit_b.cl_9.after_optimizations.txt", declarations
    )
    # jit_a's program leaves the pair unordered; jit_b's orders it (the
    # control): each read its own module before optimization.
    self.assertIsNone(a.unseen)
    self.assertEqual(a.findings.count, 1)
    self.assertIsNone(b.unseen)
    self.assertEqual(b.findings.count, 0)


HOISTING_PROGRAM = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from jax import lax
  from entangle_jax.testing import read_slot, write_slot


  def loop(slot):
    def body(i, total):
      write_slot(slot, i.astype(jnp.float32))
      return total + read_slot(slot)

    return lax.fori_loop(0, 7, body, 0.0)


  jax.jit(loop)(jnp.int32(0)).block_until_ready()
  """
)


class DumpTest(absltest.TestCase):
  """The dump command, with and without the module before optimization."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp())
    cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
    source = cls.root / "hoisting.py"
    source.write_text(HOISTING_PROGRAM)
    cls.dump = cls.root / "dump"
    env = dict(
      test_util.child_env(),
      XLA_FLAGS=f"--xla_dump_to={cls.dump} --xla_dump_hlo_as_text",
    )
    preloaded_child.run(
      [str(source)], timeout=180, env=env, cwd=cls.root
    ).check_returncode()

  def _check(self, *argv) -> tuple[int, str, str]:
    """The command (`python -m entangle_jax.testing`) on `argv`, called in
    this process (a child would import it anew for each call; its start
    in a process of its own is tests/ways_in/race_check_command_test.py's):
    its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    status = command.main([str(a) for a in argv], out=out, err=err)
    return status, out.getvalue(), err.getvalue()

  def test_every_format_reports_the_hidden_race(self):
    import json

    status, text, err = self._check(self.dump)
    self.assertEqual(status, 1, text + err)
    self.assertIn("[EJ008]", text)
    records = json.loads(self._check(self.dump, "--format", "json")[1])
    codes = [r["code"] for m in records["modules"] for r in m["races"]]
    self.assertIn("EJ008", codes)
    sarif = json.loads(self._check(self.dump, "--format", "sarif")[1])
    rules = [r["ruleId"] for run in sarif["runs"] for r in run["results"]]
    self.assertIn("EJ008", rules)

  def test_without_the_module_before_optimization_it_says_so(self):
    import json

    copy = self.root / "optimized_only"
    shutil.copytree(self.dump, copy, dirs_exist_ok=True)
    for before in copy.glob("*before_optimizations.txt"):
      before.unlink()
    _, text, _ = self._check(copy)
    self.assertIn("checked without the program's order", text)
    modules = json.loads(self._check(copy, "--format", "json")[1])["modules"]
    self.assertTrue(any(m["unseen"] for m in modules if m["native_calls"]))


PLUGIN_TESTS = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from entangle_jax import entangle
  from entangle_jax.testing import read_slot, write_slot


  def query(handle, fixed):
    token = write_slot(handle, 1.0)
    first = read_slot(token)
    updated = write_slot(entangle(token, first), 2.0)
    return first, read_slot(updated if fixed else token)


  def test_query_again():
    jax.jit(query, static_argnums=1)(jnp.int32(4), FIXED)
  """
)


class PytestPluginTest(absltest.TestCase):
  """``pytest --entangle-races=fail`` reads the module before optimization
  that XLA dumps: the merged query fails its test, the fixed one passes."""

  def run_tests(self, fixed: bool):
    root = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    source = PLUGIN_TESTS.replace("FIXED", str(fixed))
    (root / "test_query.py").write_text(source)
    return test_util.pytest_run(root, "--entangle-races=fail")

  def test_the_merged_query_fails_its_test(self):
    result = self.run_tests(fixed=False)
    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
    self.assertIn("[EJ008]", result.stdout)
    self.assertIn("XLA merged `entangle_jax_read_slot`", result.stdout)

  def test_control_the_fixed_query_passes(self):
    result = self.run_tests(fixed=True)
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
  absltest.main()
