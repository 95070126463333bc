"""``import entangle_jax`` before JAX: it does not load JAX, and what it
registers (the handler, the partitioner) is registered once ``import jax``
finishes, so a deserialized sharded module that calls entangle compiles
without collectives and runs."""

import os
import tempfile

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax import export

import entangle_jax
from tests import test_util

# In a fresh interpreter: `prelude`, whether it loaded JAX, then JAX, then
# the deserialized module (argv[1]) compiled for 8 devices (its collectives
# counted) and run. Prints "jax loaded: ..." and then "ran, N collectives"
# or the error's type.
_AFTER = """
import re, sys
{prelude}
print("jax loaded:", "jax" in sys.modules)
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.sharding import NamedSharding, PartitionSpec as P

restored = export.deserialize(open(sys.argv[1], "rb").read())
mesh = jax.make_mesh((8,), ("x",))
x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))
w = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
try:
  compiled = jax.jit(restored.call).lower(x, w).compile()
  np.testing.assert_array_equal(compiled(x, w), np.arange(16.0))
except Exception as error:
  print(type(error).__name__)
else:
  found = re.findall(r"\\b(all-gather|all-reduce|all-to-all|collective-permute"
                     r"|reduce-scatter)(-start)?\\(", compiled.as_text())
  print("ran,", len(found), "collectives")
"""


class ImportBeforeJaxTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    fn, _, _ = test_util.sharded_entangle(jax.make_mesh((8,), ("x",)))
    exported = export.export(
      fn, disabled_checks=entangle_jax.export_safety_checks()
    )(jnp.zeros(16), jnp.zeros(3))
    tmp = cls.enterClassContext(tempfile.TemporaryDirectory())
    cls.module = os.path.join(tmp, "module.bin")
    with open(cls.module, "wb") as f:
      f.write(exported.serialize())

  def run_after(self, prelude: str) -> list[str]:
    source = _AFTER.format(prelude=prelude)
    result = test_util.run_python(source, self.module, timeout=120, fresh=True)
    self.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout.strip().splitlines()

  def test_registers_once_jax_is_imported(self):
    loaded, ran = self.run_after("import entangle_jax")
    self.assertEqual(loaded, "jax loaded: False")
    # The handler runs, and the partitioner kept the payload's sharding.
    self.assertEqual(ran, "ran, 0 collectives")

  def test_control_without_entangle_jax(self):
    # Nothing registers entangle's target: the module cannot compile (jax
    # < 0.7 names the error XlaRuntimeError).
    loaded, failed = self.run_after("")
    self.assertEqual(loaded, "jax loaded: False")
    self.assertIn(failed, ["JaxRuntimeError", "XlaRuntimeError"])


if __name__ == "__main__":
  absltest.main()
