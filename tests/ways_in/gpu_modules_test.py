"""The race check on modules XLA:GPU compiled (an NVIDIA H200, stored in
data/h200/; its README says how they were made): the GPU is named after
its maker (``CUDA sm_90a``, not ``0a_gpu``), and the note under the
report states XLA:GPU's model, in text, JSON and GitHub annotations."""

import io
import json
import pathlib
import shutil
import tempfile

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing._ways_in import command as _check

DATA = pathlib.Path(__file__).resolve().parent / "data" / "h200"
SUFFIX = "jit_hazard.sm_9.0a_gpu_after_optimizations.txt"
NONE = DATA / f"module_1987.{SUFFIX}"  # No ordering: 1 race.
BARRIER = DATA / f"module_6619.{SUFFIX}"  # optimization_barrier: 1 race.
ENTANGLE = DATA / f"module_7281.{SUFFIX}"  # entangle: none.
PROGRAM_ORDER = DATA / f"module_7943.{SUFFIX}"  # in_program_order: none.

GPU_NOTE = (
  "Note: 1 module for CUDA sm_90a: XLA:GPU runs a module's thunks in order "
  "on one stream by default"
)


def run(*argv: str) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  status = _check.main(list(argv), out=out, err=err)
  return status, out.getvalue(), err.getvalue()


class GpuModuleTest(absltest.TestCase):
  def test_the_race_is_found_and_the_gpu_named(self):
    status, out, err = run(str(NONE))
    self.assertEqual(status, 1, out + err)
    self.assertIn("1 with races, 1 pair.", out)
    self.assertIn(GPU_NOTE, out)
    self.assertIn('"not ordered" is a race', out)
    self.assertNotIn("for 0a_gpu", out)  # As the old pattern read it.
    # XLA:CPU's model is not what the check assumed of this module.
    self.assertNotIn("XLA:CPU's runtime", out)

  def test_ordered_modules_have_no_race_and_the_same_note(self):
    for module in (ENTANGLE, PROGRAM_ORDER):
      status, out, err = run(str(module))
      self.assertEqual(status, 0, out + err)
      self.assertIn("0 with races, 0 pairs.", out)
      self.assertIn(GPU_NOTE, out)

  def test_the_module_text_of_the_barrier_program_races(self):
    # module_text writes get-tuple-elements out: the barrier orders nothing
    # on XLA:GPU either. Its file names no platform: the note says so.
    status, out, err = run(str(DATA / "text_OPTIMIZATION_BARRIER.txt"))
    self.assertEqual(status, 1, out + err)
    self.assertIn("1 with races, 1 pair.", out)
    self.assertIn("1 module for a platform its file does not name", out)
    # Control: the ordered program's module text has none.
    self.assertEqual(run(str(DATA / "text_ENTANGLE.txt"))[0], 0)

  def test_each_platform_has_its_note(self):
    status, out, _ = run(str(NONE), str(DATA / "text_NONE.txt"))
    self.assertEqual(status, 1)
    self.assertIn(GPU_NOTE, out)
    self.assertIn(
      "Note: 1 module for a platform its file does not name (XLA names none "
      "for a module it loaded from JAX's persistent compilation cache): the "
      "rules describe XLA:CPU's runtime",
      out,
    )
    self.assertIn("Checked 2 modules (2 with native calls): 2 with races", out)

  def test_rocm_is_named_by_its_architecture(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, folder)
    rocm = folder / "module_1987.jit_hazard.gfx942_gpu_after_optimizations.txt"
    shutil.copy(NONE, rocm)
    status, out, _ = run(str(folder))
    self.assertEqual(status, 1)
    self.assertIn("Note: 1 module for ROCm gfx942: XLA:GPU runs", out)

  def test_a_cpu_module_has_no_note(self):
    # Control: the same text under a CPU module's name gets no note, so the
    # GPU note above comes from the name.
    folder = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, folder)
    cpu = folder / "module_1987.jit_hazard.cpu_after_optimizations.txt"
    shutil.copy(NONE, cpu)
    status, out, _ = run(str(cpu))
    self.assertEqual(status, 1)
    self.assertNotIn("XLA:GPU", out)

  def test_json_names_the_gpu_and_its_runtime(self):
    status, out, _ = run("--json", str(NONE))
    self.assertEqual(status, 1)
    found = json.loads(out)
    (module,) = found["modules"]
    self.assertEqual(module["platform"], "CUDA sm_90a")
    self.assertEqual(module["platform_in_file_name"], "sm_9.0a_gpu")
    self.assertEqual(module["runtime"], "XLA:GPU")
    self.assertLen(module["races"], 1)
    self.assertStartsWith(found["platform_note"], GPU_NOTE)

  def test_github_has_the_note(self):
    status, out, _ = run("--format", "github", str(NONE))
    self.assertEqual(status, 1)
    notices = [
      line
      for line in out.splitlines()
      if line.startswith("::notice title=entangle-jax runtime model::")
    ]
    self.assertLen(notices, 1, out)
    self.assertIn(GPU_NOTE, notices[0])
    self.assertLen([a for a in out.splitlines() if a.startswith("::error")], 1)


class BarrierDumpTest(absltest.TestCase):
  """XLA's own dump of the barrier program passes the barrier's tuple
  element as a compact operand (`%optimization_barrier.4.0#0`). Read as
  the whole tuple, as the parser once did, the example store's
  declarations were refused (exit 2) and, with the targets undeclared,
  the race was missed (0 pairs)."""

  def test_the_barrier_module_has_one_race_on_a_named_gpu(self):
    status, out, err = run(str(BARRIER))
    self.assertEqual(status, 1, out + err)
    self.assertIn("1 with races, 1 pair.", out)
    self.assertIn(GPU_NOTE, out)

  def test_the_barrier_module_races_with_its_targets_undeclared(self):
    # The same module, the store's targets renamed so that no declaration
    # applies: the calls write any resource, and at least the read and the
    # second write still race (the parser that took the whole tuple said
    # 0: a missed race).
    folder = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, folder)
    renamed = folder / BARRIER.name
    renamed.write_text(
      BARRIER.read_text()
      .replace('"entangle_jax_read_slot"', '"gpu_modules_test_read"')
      .replace('"entangle_jax_write_slot"', '"gpu_modules_test_write"')
    )
    self.assertNotIn("entangle_jax_write_slot", renamed.read_text())
    status, out, err = run(str(renamed))
    self.assertEqual(status, 1, out + err)
    self.assertNotIn(" 0 pairs", out)

  def test_the_dump_and_module_text_give_the_same_races(self):
    # module_text of the same program writes the get-tuple-element out.
    explicit = testing.races(
      (DATA / "text_OPTIMIZATION_BARRIER.txt").read_text()
    )
    compact = testing.races(BARRIER.read_text())
    self.assertIn("%optimization_barrier.4.0#0", BARRIER.read_text())
    self.assertEqual(
      [(r.first.target, r.second.target) for r in compact],
      [(r.first.target, r.second.target) for r in explicit],
    )
    self.assertLen(compact, 1)


if __name__ == "__main__":
  absltest.main()
