"""The platform of a dumped module, from the name XLA gave its file:
CUDA by compute capability, ROCm by architecture, anything else as
written, and none for a module loaded from the cache."""

import re

from absl.testing import absltest, parameterized

from entangle_jax.testing._findings import platforms
from entangle_jax.testing._findings.platforms import (
  CPU_RUNTIME,
  GPU_RUNTIME,
  of_file_name,
)
from entangle_jax.testing._hlo import host_callbacks

OLD_PATTERN = re.compile(r"\.(\w+?)_after_optimizations\.txt$")
"""How module_files read the platform before: kept to show the names
below are ones it got wrong."""


def named(platform: str) -> str:
  return f"module_1987.jit_hazard.{platform}_after_optimizations.txt"


class PlatformOfFileNameTest(parameterized.TestCase):
  @parameterized.parameters(
    # As XLA:GPU writes the compute capability, and as CUDA names it.
    ("sm_9.0a_gpu", "CUDA sm_90a", "CUDA", "sm_90a"),
    ("sm_8.0_gpu", "CUDA sm_80", "CUDA", "sm_80"),
    ("sm_8.6_gpu", "CUDA sm_86", "CUDA", "sm_86"),
    ("sm_12.0_gpu", "CUDA sm_120", "CUDA", "sm_120"),
    ("sm_10.0a_gpu", "CUDA sm_100a", "CUDA", "sm_100a"),
    ("sm_100a_gpu", "CUDA sm_100a", "CUDA", "sm_100a"),
    # ROCm's architecture names, target features kept.
    ("gfx942_gpu", "ROCm gfx942", "ROCm", "gfx942"),
    ("gfx90a_gpu", "ROCm gfx90a", "ROCm", "gfx90a"),
    ("gfx950_gpu", "ROCm gfx950", "ROCm", "gfx950"),
    (
      "gfx90a:sramecc+:xnack-_gpu",
      "ROCm gfx90a:sramecc+:xnack-",
      "ROCm",
      "gfx90a:sramecc+:xnack-",
    ),
  )
  def test_a_gpu_is_named_by_its_maker(self, written, shown, vendor, device):
    platform = of_file_name(named(written))
    assert platform is not None
    self.assertEqual(str(platform), shown)
    self.assertEqual(
      (platform.written, platform.vendor, platform.device),
      (written, vendor, device),
    )
    self.assertEqual(platform.runtime, GPU_RUNTIME)

  def test_the_old_pattern_mangled_the_cuda_name(self):
    # Control: the names above are the ones the old pattern got wrong.
    found = OLD_PATTERN.search(named("sm_9.0a_gpu"))
    assert found is not None
    self.assertEqual(found.group(1), "0a_gpu")
    self.assertNotEqual(str(of_file_name(named("sm_9.0a_gpu"))), "0a_gpu")

  def test_cpu(self):
    self.assertEqual(of_file_name(named("cpu")), platforms.CPU)
    self.assertEqual(str(platforms.CPU), "cpu")
    self.assertEqual(platforms.CPU.runtime, CPU_RUNTIME)

  @parameterized.parameters("xpu-2", "my_device")
  def test_another_platform_is_kept_as_written(self, written):
    platform = of_file_name(named(written))
    assert platform is not None
    self.assertEqual(str(platform), written)
    self.assertEqual(platform.written, written)
    self.assertIsNone(platform.runtime)  # A runtime the check does not know.

  def test_a_tpu_module_is_named_by_its_cl_part(self):
    # As a TPU v5e wrote it (jax 0.10.2): no platform word, a cl_NNN part.
    name = "module_0003.jit_f.cl_933746096.after_optimizations.txt"
    platform = of_file_name(name)
    self.assertEqual(platform, platforms.TPU)
    assert platform is not None
    self.assertEqual(str(platform), "TPU")
    self.assertEqual(platform.runtime, platforms.TPU_RUNTIME)
    # Control: the same module from the cache has no cl_ part and no name.
    self.assertIsNone(of_file_name("module_0003.jit_f.after_optimizations.txt"))
    # Nor is the module before optimization an optimized one.
    self.assertIsNone(
      of_file_name("module_0003.jit_f.cl_933746096.before_optimizations.txt")
    )

  def test_a_tpu_module_is_known_by_its_tiled_layouts(self):
    tpu = (
      "HloModule jit_f, is_scheduled=true, entry_computation_layout="
      "{(f32[]{:T(128)})->f32[8]{0:T(128)}}\n"
    )
    cpu = (
      "HloModule jit_f, is_scheduled=true, entry_computation_layout="
      "{(f32[])->f32[8]{0}}\n"
    )
    self.assertTrue(host_callbacks.is_tpu_text(tpu))
    self.assertFalse(host_callbacks.is_tpu_text(cpu))  # Control.

  def test_a_gpu_whose_maker_the_name_omits_is_still_a_gpu(self):
    platform = of_file_name(named("gpu"))
    assert platform is not None
    self.assertEqual(str(platform), "gpu")
    self.assertEqual(platform.runtime, GPU_RUNTIME)

  @parameterized.parameters(
    # A module XLA loaded from JAX's persistent compilation cache.
    "module_0007.jit_f.after_optimizations.txt",
    # Other files: module_text's output, XLA's other dumps of the module.
    "text_NONE.txt",
    "module_1987.jit_hazard.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt",
    "module_1987.jit_hazard.before_optimizations.txt",
  )
  def test_no_platform(self, name):
    self.assertIsNone(of_file_name(name))

  def test_a_module_name_with_dots(self):
    # JAX keeps dots in module names (mlir.sanitize_name).
    platform = of_file_name(
      "module_0001.jit_f.v2.sm_9.0a_gpu_after_optimizations.txt"
    )
    self.assertEqual(str(platform), "CUDA sm_90a")
    self.assertEqual(
      of_file_name("module_0001.jit_f.v2.cpu_after_optimizations.txt"),
      platforms.CPU,
    )


if __name__ == "__main__":
  absltest.main()
