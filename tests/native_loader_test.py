"""An unloadable extension raises an ImportError that says how to rebuild."""

import sys
from unittest import mock

from absl.testing import absltest

import entangle_jax
from entangle_jax import _native_loader


class NativeLoaderTest(absltest.TestCase):
  def test_unloadable_extension_explains_how_to_rebuild(self):
    # A None entry in sys.modules makes `import` of that name fail; the
    # package attribute left by the first import must go too.
    with (
      mock.patch.dict(sys.modules, {"entangle_jax._native": None}),
      mock.patch.dict(entangle_jax.__dict__),
    ):
      entangle_jax.__dict__.pop("_native", None)
      with self.assertRaisesRegex(ImportError, r"uv sync --reinstall-package"):
        _native_loader.load_native()

  def test_loadable_extension(self):
    self.assertGreater(_native_loader.load_native().num_slots, 0)


if __name__ == "__main__":
  absltest.main()
