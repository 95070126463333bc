"""What can be said of a dumped module's text before it is parsed, and what
the module before optimization beside it adds (`_hlo.dumped_module`), on
dumps a CPU (jax 0.12, entry shardings left out) and a TPU v5e (host
callbacks) wrote."""

import pathlib

from absl.testing import absltest

from entangle_jax._src.targets import platforms
from entangle_jax.testing._hlo import dumped_module, entry_shardings

DATA = pathlib.Path(__file__).parent / "data"
SHARDED = DATA / "entry_shardings" / "module_0008.jit_hazard"
TPU = DATA / "tpu" / "shared" / "module_0007.jit_f.cl_933746096"  # entangle


def read(prefix: pathlib.Path, suffix: str) -> str:
  (found,) = prefix.parent.glob(f"{prefix.name}*{suffix}")
  return found.read_text()


class DumpedModuleTest(absltest.TestCase):
  def test_a_whole_module_and_ones_cut_short(self):
    text = read(SHARDED, "after_optimizations.txt")
    self.assertIsNone(dumped_module.why_unreadable(text))  # The control.
    self.assertIn("empty", str(dumped_module.why_unreadable(" \n")))
    self.assertIn(
      "cut short", str(dumped_module.why_unreadable(text[: len(text) // 2]))
    )
    self.assertIsNotNone(dumped_module.why_unreadable("not a module\n"))

  def test_name_platform_and_native_calls(self):
    cpu = read(SHARDED, "after_optimizations.txt")
    tpu = read(TPU, "after_optimizations.txt")
    self.assertEqual(dumped_module.module_name(cpu), "jit_hazard")
    self.assertIsNone(dumped_module.platform_of(cpu))
    self.assertIs(dumped_module.platform_of(tpu), platforms.TPU)
    # A TPU callback is no custom call: its transfers are the native call.
    self.assertNotIn("custom-call", tpu)
    self.assertTrue(dumped_module.has_native_calls(tpu))
    self.assertTrue(dumped_module.has_native_calls(cpu))
    self.assertFalse(dumped_module.has_native_calls("HloModule m\n"))

  def test_completed_takes_what_the_optimized_module_left_out(self):
    text = read(SHARDED, "after_optimizations.txt")
    before = read(SHARDED, "before_optimizations.txt")
    self.assertTrue(dumped_module.needs_before(text))
    done = dumped_module.completed(text, before)
    self.assertFalse(entry_shardings.missing(done))
    # The controls: nothing beside it, nothing to take.
    self.assertEqual(dumped_module.completed(text, None), text)
    self.assertFalse(dumped_module.needs_before(done))

  def test_a_tpu_module_with_callbacks_reads_its_barriers(self):
    text = read(TPU, "after_optimizations.txt")
    before = read(TPU, "before_optimizations.txt")
    self.assertTrue(dumped_module.needs_before(text))
    self.assertNotEqual(dumped_module.completed(text, before), text)


if __name__ == "__main__":
  absltest.main()
