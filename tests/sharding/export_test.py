"""jax.export: entangle survives serialization and runs in a fresh process.

Sharded and AbstractMesh exports are in sharding_test.py.
"""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax import export

import entangle_jax
from entangle_jax import entangle
from tests import test_util  # sets up 8 CPU devices

_FRESH_PROCESS = """
import sys
import numpy as np
from jax import export
import entangle_jax  # registers the handler the module calls

exported = export.deserialize(open(sys.argv[1], "rb").read())
out = exported.call(np.arange(4, dtype=np.float32), np.float32(1))
np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32))
print("fresh process ok")
"""


def fn(x, w):
  return entangle(x, w) * 2


class ExportTest(absltest.TestCase):
  def export(self, f, *args):
    return export.export(
      f, disabled_checks=entangle_jax.export_safety_checks()
    )(*args)

  def test_refused_without_the_safety_checks(self):
    with self.assertRaisesRegex(ValueError, "entangle_jax_entangle"):
      export.export(jax.jit(fn))(jnp.ones(4), 1.0)

  def test_round_trip(self):
    exported = self.export(jax.jit(fn), jnp.ones(4), jnp.float32(1))
    restored = export.deserialize(exported.serialize())
    np.testing.assert_array_equal(
      restored.call(jnp.arange(4.0), jnp.float32(1)), jnp.arange(4.0) * 2
    )

  def test_runs_in_a_fresh_process(self):
    exported = self.export(
      jax.jit(lambda x, w: entangle(x, w)), jnp.ones(4), jnp.float32(1)
    )
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, "module.bin")
      with open(path, "wb") as f:
        f.write(exported.serialize())
      result = test_util.run_python(_FRESH_PROCESS, path, timeout=120)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("fresh process ok", result.stdout)


if __name__ == "__main__":
  absltest.main()
