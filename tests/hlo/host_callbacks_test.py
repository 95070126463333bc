"""Host callbacks on TPU, where they are host transfers, not custom calls.

On modules a TPU v5e compiled (jax 0.10.2; hlo/data/tpu/README.md): each
callback's send/recv transfers are read as one call, declared as a host
callback on CPU; the barriers that ``entangle`` leaves in the module
before optimization order two callbacks where the optimized module's
schedule agrees; TPU modules are named as such. Each ordering case has its
racing control.
"""

import io
import json
import pathlib
import re

from absl.testing import absltest

from entangle_jax._src.targets import sources
from entangle_jax._src.targets.names import TPU_HOST_CALLBACK_TARGET
from entangle_jax.testing import OrderAnalysis, order_graph
from entangle_jax.testing._emitters import github, json_report, sarif, sentences
from entangle_jax.testing._findings import platforms
from entangle_jax.testing._findings.records import Run
from entangle_jax.testing._hlo import host_callbacks, parser
from entangle_jax.testing._ways_in import command, module_files

DATA = pathlib.Path(__file__).parent / "data" / "tpu"
SHARED = DATA / "shared"
DUMPED = DATA / "dumped"
KERNEL = DATA / "kernel"
NONE, ENTANGLE, IN_PROGRAM_ORDER = (
  SHARED / f"module_{n}.jit_f.cl_933746096.after_optimizations.txt"
  for n in ("0003", "0007", "0011")
)
GROUPS = 8
_SEND = re.compile(
  r"^\s*%([\w.\-]+) = [^\n]*? send\("
  r"[^\n]*?_xla_host_transfer_rendezvous=\"(\d+)\"",
  re.MULTILINE,
)


def check(path: pathlib.Path):
  return module_files.check_module(path, sources.current())


def keys(path: pathlib.Path) -> dict[str, int]:
  """Each call's name (its first send's) -> its callback's key (the
  smallest rendezvous key of its transfers, its first send's here)."""
  found: dict[str, int] = {}
  for name, key in _SEND.findall(path.read_text()):
    found.setdefault(name, int(key))
  return found


def key_pairs(path: pathlib.Path) -> set[tuple[int, int]]:
  """The module's reported pairs, as pairs of callback keys, smaller
  first."""
  named = keys(path)
  result = check(path)
  pairs = set()
  for p in result.findings.pairs:
    a, b = named[p.first.instruction], named[p.second.instruction]
    pairs.add((min(a, b), max(a, b)))
  return pairs


def hazard_pairs() -> set[tuple[int, int]]:
  """The hazard's read/second-write pair of each group: group k's write(1),
  read and write(2) have keys 2 + 6k, 4 + 6k and 6 + 6k."""
  return {(4 + 6 * k, 6 + 6 * k) for k in range(GROUPS)}


class GroupingTest(absltest.TestCase):
  def test_each_callback_is_one_call_of_the_tpu_target(self):
    module = parser.parse(NONE.read_text())
    body = module.computations[module.entry]
    calls = [i for i in body if i.opcode == "custom-call"]
    self.assertLen(calls, 3 * GROUPS)
    self.assertEqual({c.target for c in calls}, {TPU_HOST_CALLBACK_TARGET})
    self.assertTrue(all(c.side_effect for c in calls))
    self.assertFalse(any(i.host_transfer for i in body))
    # Control: the text holds 24 callbacks' sends and receives.
    text = NONE.read_text()
    self.assertEqual(text.count(" send("), 3 * GROUPS)
    self.assertEqual(text.count(" recv("), 3 * GROUPS)
    self.assertNotIn("custom-call", text)

  def test_two_operands_and_two_results_are_one_call(self):
    path = DUMPED / (
      "module_0051.jit_tpu_two_operands_two_results.cl_933746096."
      "after_optimizations.txt"
    )
    text = path.read_text()
    self.assertEqual(text.count(" send("), 3)  # 2 + 1 operands...
    self.assertEqual(text.count(" recv("), 3)  # ...2 + 1 results.
    result = check(path)
    self.assertIsNone(result.unchecked)
    self.assertEqual(result.native_calls, 2)
    self.assertEqual(result.findings.pairs, ())  # The second reads the first.

  def test_pure_callback_is_no_native_call_as_on_cpu(self):
    tpu = check(
      DUMPED
      / "module_0060.jit_tpu_pure_and_io.cl_933746096.after_optimizations.txt"
    )
    cpu = check(
      DUMPED / "module_0055.jit_tpu_pure_and_io.cpu_after_optimizations.txt"
    )
    self.assertEqual((tpu.native_calls, cpu.native_calls), (1, 1))
    module = parser.parse(
      (
        DUMPED
        / "module_0060.jit_tpu_pure_and_io.cl_933746096.after_optimizations.txt"
      ).read_text()
    )
    calls = [
      i
      for body in module.computations.values()
      for i in body
      if i.opcode == "custom-call"
    ]
    self.assertEqual(sorted(c.side_effect for c in calls), [False, True])

  def test_token_chain_orders_ordered_callbacks(self):
    ordered = check(
      DUMPED
      / "module_0069.jit_tpu_ordered_chain.cl_933746096.after_optimizations.txt"
    )
    self.assertEqual(ordered.native_calls, 3)
    self.assertEqual(ordered.findings.pairs, ())
    # Control: two unordered io_callbacks race.
    unordered = check(
      DUMPED / "module_0054.jit_tpu_two_unordered_writes.cl_933746096."
      "after_optimizations.txt"
    )
    self.assertLen(unordered.findings.pairs, 1)


class SharedModulesTest(absltest.TestCase):
  def test_the_unordered_hazard_has_each_groups_pair(self):
    found = key_pairs(NONE)
    self.assertTrue(hazard_pairs() <= found, hazard_pairs() - found)

  def test_the_entangle_module_has_none_of_them(self):
    found = key_pairs(ENTANGLE)
    self.assertEqual(hazard_pairs() & found, set())
    # Control: without the module before optimization, which holds the
    # barriers, the optimized text alone has them all.
    alone = OrderAnalysis(ENTANGLE.read_text()).races()
    named = keys(ENTANGLE)
    alone_keys = {
      (min(named[a], named[b]), max(named[a], named[b])) for a, b in alone
    }
    self.assertTrue(hazard_pairs() <= alone_keys)

  def test_in_program_order_keeps_only_what_the_schedule_broke(self):
    found = key_pairs(IN_PROGRAM_ORDER)
    self.assertEqual(hazard_pairs() & found, set())
    # The schedule sends groups 1-7's first write before group 0's
    # callbacks run, against in_program_order's barriers: measured on the
    # TPU, those callbacks ran out of program order in 20 of 20 runs
    # (docs/platforms.md, "TPU"). Group 0's second write (key 6) and group
    # 1's first write (key 8) are such a pair.
    self.assertIn((6, 8), found)
    # Within group 0, which the schedule keeps in order, nothing.
    self.assertEqual({p for p in found if p[1] <= 6}, set())

  def test_barrier_pairs_read_from_the_module_before_optimization(self):
    before = ENTANGLE.with_name(
      ENTANGLE.name.replace("after_optimizations", "before_optimizations")
    ).read_text()
    pairs = host_callbacks.orders_before_optimization(before)
    self.assertTrue(hazard_pairs() <= pairs)
    # Control: the unordered hazard's module has no barrier.
    none_before = NONE.with_name(
      NONE.name.replace("after_optimizations", "before_optimizations")
    ).read_text()
    self.assertEqual(
      host_callbacks.orders_before_optimization(none_before), set()
    )


class ScheduleTest(absltest.TestCase):
  def test_a_barrier_the_schedule_broke_orders_nothing(self):
    # entangle(x + 1, a) before the second io_callback: the TPU schedule
    # sent the second before the first ran, and the TPU ran them in that
    # order; on CPU, entangle orders them.
    tpu = check(
      DUMPED
      / "module_0075.jit_tpu_entangle_pair.cl_933746096.after_optimizations.txt"
    )
    cpu = check(
      DUMPED / "module_0085.jit_tpu_entangle_pair.cpu_after_optimizations.txt"
    )
    self.assertLen(tpu.findings.pairs, 1)
    self.assertEqual(cpu.findings.pairs, ())
    before = DUMPED / (
      "module_0075.jit_tpu_entangle_pair.cl_933746096.before_optimizations.txt"
    )
    self.assertLen(
      host_callbacks.orders_before_optimization(before.read_text()), 1
    )


class PallasKernelTest(absltest.TestCase):
  """entangle as the Pallas TPU kernel (0.5.0, scalar payloads padded into
  it), as the TPU compiled it: the optimized module keeps the kernel (a
  Mosaic custom call) and its data edges, which order the callbacks; the
  TPU ran them in that order (data/tpu/README.md)."""

  def after(self, name: str) -> pathlib.Path:
    return KERNEL / f"{name}.cl_933746096.after_optimizations.txt"

  def test_a_scalar_payload_orders_the_pair_the_barrier_did_not(self):
    path = self.after("module_0091.jit_tpu_entangle_pair")
    text = path.read_text()
    (kernel,) = [
      line
      for line in text.splitlines()
      if 'custom_call_target="tpu_custom_call"' in line
    ]
    # The scalar payload went in padded to two elements.
    self.assertRegex(kernel, r"= f32\[2\]\{[^}]*\} custom-call\(")
    self.assertEqual(check(path).findings.pairs, ())
    # No barrier left for the check to read: the order is the kernel's data.
    before = KERNEL / path.name.replace("after_", "before_")
    self.assertEmpty(
      host_callbacks.orders_before_optimization(before.read_text())
    )
    # Control: the same program with 0.4.0's barrier, which XLA:TPU
    # removed; the TPU ran the second callback first in 20 of 20 runs.
    barrier = check(
      DUMPED
      / "module_0075.jit_tpu_entangle_pair.cl_933746096.after_optimizations.txt"
    )
    self.assertLen(barrier.findings.pairs, 1)

  def test_in_program_order_through_the_kernel_has_no_pairs(self):
    path = self.after("module_0019.jit_tpu_hazard_ipo")
    self.assertGreater(
      path.read_text().count('custom_call_target="tpu_custom_call"'), 0
    )
    self.assertEqual(check(path).findings.pairs, ())
    # Control: in_program_order with the barrier (0.4.0), whose groups the
    # TPU ran out of program order in 20 of 20 runs.
    self.assertIn((6, 8), key_pairs(IN_PROGRAM_ORDER))

  def test_the_entangle_hazard_has_none_of_the_groups_pairs(self):
    found = key_pairs(self.after("module_0007.jit_tpu_hazard_entangle"))
    self.assertEqual(hazard_pairs() & found, set())
    # What it has is across groups, which the TPU ran out of program order
    # in 20 of 20 runs (host callbacks may all touch one Python state).
    self.assertTrue(found)
    self.assertTrue(all((a - 2) // 6 != (b - 2) // 6 for a, b in found))
    # Control: the unordered hazard dumped in the same run has every
    # group's pair.
    none = key_pairs(self.after("module_0003.jit_tpu_hazard_none"))
    self.assertTrue(hazard_pairs() <= none, hazard_pairs() - none)


class SameAsCpuTest(absltest.TestCase):
  def test_each_program_has_the_pairs_it_has_on_cpu(self):
    # Where the schedule keeps what the program orders, TPU and CPU agree.
    by_program: dict[str, dict[str, int]] = {}
    for path in sorted(DUMPED.glob(module_files.OPTIMIZED)):
      program = re.search(r"jit_(\w+?)\.(cl_|cpu_)", path.name)
      assert program is not None
      result = check(path)
      self.assertIsNone(result.unchecked, path.name)
      side = "cpu" if ".cpu_" in path.name else "tpu"
      by_program.setdefault(program.group(1), {})[side] = len(
        result.findings.pairs
      )
    compared = {p: v for p, v in by_program.items() if len(v) == 2}
    self.assertGreaterEqual(len(compared), 9)
    differ = {p for p, v in compared.items() if v["tpu"] != v["cpu"]}
    self.assertEqual(differ, {"tpu_entangle_pair"})
    self.assertGreater(sum(v["tpu"] for v in compared.values()), 0)


class PlatformTest(absltest.TestCase):
  def test_tpu_modules_are_named_tpu_in_reports_and_json(self):
    results = [check(p) for p in (NONE, ENTANGLE, IN_PROGRAM_ORDER)]
    self.assertEqual({str(r.platform) for r in results}, {"TPU"})
    run = Run(results)
    report = json_report.as_json(run)
    self.assertEqual({m["platform"] for m in report["modules"]}, {"TPU"})
    self.assertEqual(
      {m["runtime"] for m in report["modules"]}, {platforms.TPU_RUNTIME}
    )
    note = sentences.platform_note(run)
    assert note is not None
    self.assertIn(sentences.TPU_MODEL, note)
    self.assertNotIn("persistent", note)
    json.dumps(report)  # Serialisable.
    # SARIF and GitHub: the pairs, with the TPU note.
    self.assertIn(TPU_HOST_CALLBACK_TARGET, sarif.render(run))
    self.assertIn("modules for TPU", sarif.render(run))
    annotations = github.render(run)
    self.assertIn("::notice", annotations)
    self.assertIn("modules for TPU", annotations)

  def test_a_tpu_module_without_its_file_name_is_known_by_its_text(self):
    result = check(SHARED / "hazard_compiled_as_text.txt")
    self.assertIsNone(result.unchecked)
    self.assertEqual(result.platform, platforms.TPU)
    # Control: a CPU module's text is not taken for a TPU's.
    cpu = check(
      DUMPED / "module_0085.jit_tpu_entangle_pair.cpu_after_optimizations.txt"
    )
    self.assertEqual(cpu.platform, platforms.CPU)


class WaysInTest(absltest.TestCase):
  def test_the_command_reports_the_tpu_races(self):
    out, err = io.StringIO(), io.StringIO()
    status = command.main([str(SHARED)], out, err)
    self.assertEqual(status, 1, err.getvalue())
    text = out.getvalue()
    self.assertIn("Note: 3 modules for TPU:", text)
    self.assertIn(TPU_HOST_CALLBACK_TARGET, text)
    self.assertNotIn("persistent compilation cache", text)
    self.assertIn("3 with races", text)

  def test_the_command_json_names_the_platform(self):
    out = io.StringIO()
    status = command.main(["--json", str(DUMPED)], out, io.StringIO())
    self.assertEqual(status, 1)
    report = json.loads(out.getvalue())
    tpu = [m for m in report["modules"] if "cl_933746096" in m["path"]]
    self.assertTrue(tpu)
    self.assertEqual({m["platform"] for m in tpu}, {"TPU"})
    cpu = [m for m in report["modules"] if ".cpu_" in m["path"]]
    self.assertEqual({m["platform"] for m in cpu}, {"cpu"})  # Control.

  def test_the_order_graph_draws_the_tpu_race(self):
    racing = (
      DUMPED
      / "module_0075.jit_tpu_entangle_pair.cl_933746096.after_optimizations.txt"
    )
    graph = order_graph(racing.read_text())
    self.assertIn(TPU_HOST_CALLBACK_TARGET, graph)
    self.assertIn("color=red", graph)
    # Control: the ordered chain's calls are drawn, with no race.
    ordered = (
      DUMPED
      / "module_0069.jit_tpu_ordered_chain.cl_933746096.after_optimizations.txt"
    )
    graph = order_graph(ordered.read_text())
    self.assertEqual(graph.count(TPU_HOST_CALLBACK_TARGET), 3)
    self.assertNotIn("color=red", graph)


if __name__ == "__main__":
  absltest.main()
