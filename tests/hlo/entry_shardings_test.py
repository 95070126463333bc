"""The entry parameters' shardings, which the optimized module of jax 0.11
and newer no longer prints: taken from the module before optimization
that XLA dumps beside it, or from the ``Compiled``. Without them, a slot
array split over the devices, its elements declared distinct, was taken
for one the devices share, and the check reported races across devices
that the report's own fix had removed."""

import pathlib
import shutil
import tempfile

import jax
from absl.testing import absltest
from jax.sharding import PartitionSpec as P

from entangle_jax import testing
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._hlo import entry_shardings
from entangle_jax.testing._ways_in import module_files
from tests.hlo import sharded_programs

DATA = pathlib.Path(__file__).parent / "data" / "entry_shardings"
OPTIMIZED = DATA / "module_0008.jit_hazard.cpu_after_optimizations.txt"
DECLARATIONS = Declarations(sharded_programs.DECLARATIONS)


def across(races) -> int:
  return sum(1 for r in races if r.across_devices)


class WordsTest(absltest.TestCase):
  def test_shardy_and_gspmd_words(self):
    normalized = entry_shardings.normalized
    self.assertEqual(
      normalized("{mesh['x'=2], [{'x'}]}"), entry_shardings.TILED
    )
    self.assertEqual(
      normalized("{mesh['x'=2, 'y'=2], [{'x'}, {'y'}]}"), entry_shardings.TILED
    )
    self.assertEqual(
      normalized("{mesh['x'=2, 'y'=2], [{'x'}]}"), entry_shardings.PARTIAL
    )
    self.assertEqual(
      normalized("{mesh['x'=2], [{}]}"), entry_shardings.REPLICATED
    )
    self.assertIsNone(normalized("{mesh['x'=2], manual}"))
    self.assertIsNone(normalized("{mesh['x'=2], [{'z'}]}"))  # Unknown axis.
    self.assertEqual(normalized("{replicated}"), "{replicated}")
    self.assertEqual(normalized("{devices=[2]<=[2]}"), "{devices=[2]<=[2]}")

  def test_complete_writes_only_missing_entry_parameters(self):
    text = (
      "HloModule m, num_partitions=2\n\n"
      "%f (p: s32[]) -> s32[] {\n"
      "  ROOT %p = s32[] parameter(0)\n"
      "}\n\n"
      "ENTRY %main (a: s32[1], b: s32[1]) -> s32[1] {\n"
      '  %a = s32[1]{0} parameter(0), metadata={op_name="a"}\n'
      "  %b = s32[1]{0} parameter(1)\n"
      "  ROOT %c = s32[1]{0} add(%a, %b)\n"
      "}\n"
    )
    self.assertTrue(entry_shardings.missing(text))
    done = entry_shardings.complete(
      text, {0: entry_shardings.TILED, 1: entry_shardings.REPLICATED}
    )
    tiled = f"parameter(0), sharding={entry_shardings.TILED}, "
    self.assertIn(tiled + 'metadata={op_name="a"}', done)
    self.assertIn("parameter(1), sharding={replicated}\n", done)
    self.assertIn("  ROOT %p = s32[] parameter(0)\n", done)  # Not ENTRY's.
    self.assertFalse(entry_shardings.missing(done))
    single = text.replace("num_partitions=2", "num_partitions=1")
    self.assertFalse(entry_shardings.missing(single))


class DumpTest(absltest.TestCase):
  """jax 0.12.0.1's dump of `sharded_programs.hazard` (see its module)."""

  def test_optimized_module_prints_no_entry_sharding(self):
    self.assertTrue(entry_shardings.missing(OPTIMIZED.read_text()))

  def test_read_with_the_module_before_optimization(self):
    result = module_files.check_module(OPTIMIZED, DECLARATIONS)
    self.assertIsNone(result.unchecked)
    self.assertLen(result.races, 1)  # The hazard on each device.
    self.assertFalse(any(r.across_devices for r in result.races))

  def test_control_without_the_module_before_optimization(self):
    with tempfile.TemporaryDirectory() as folder:
      alone = pathlib.Path(folder) / OPTIMIZED.name
      shutil.copy(OPTIMIZED, alone)
      result = module_files.check_module(alone, DECLARATIONS)
    self.assertTrue(any(r.across_devices for r in result.races))


class CompiledTest(absltest.TestCase):
  """The same program compiled here, on whichever jax runs the tests."""

  def compiled(self, spec):
    return (
      jax.jit(lambda s: sharded_programs.hazard(s, spec))
      .lower(sharded_programs.split_slots(spec))
      .compile()
    )

  def races(self, spec):
    analysis = testing.OrderAnalysis(
      self.compiled(spec), declarations=DECLARATIONS
    )
    return analysis.races()

  def test_split_slots_race_on_one_device_only(self):
    races = self.races(P("x"))
    self.assertNotEmpty(races)
    self.assertEqual(across(races), 0)

  def test_control_shared_slots_race_across_devices(self):
    self.assertGreater(across(self.races(P())), 0)


if __name__ == "__main__":
  absltest.main()
