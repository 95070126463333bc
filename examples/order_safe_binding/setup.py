"""Builds native/ into tally_jax/libtally.so, a plain shared library that
tally_jax loads with ctypes (not a Python extension module: it has no
Python API, only XLA FFI handlers and two C functions)."""

import sysconfig

import jax
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class PlainLibrary(build_ext):
  """Names the library libtally.so, as the Bazel build does, instead of a
  Python extension's tagged name."""

  def get_ext_filename(self, fullname: str) -> str:
    tagged = super().get_ext_filename(fullname)  # libtally.cpython-...so
    return tagged.removesuffix(sysconfig.get_config_var("EXT_SUFFIX")) + ".so"


setup(
  ext_modules=[
    Extension(
      "tally_jax.libtally",
      sources=["native/tally.cc", "native/tally_ffi.cc"],
      include_dirs=[jax.ffi.include_dir()],
      extra_compile_args=["-std=c++17"],
      language="c++",
    )
  ],
  cmdclass={"build_ext": PlainLibrary},
)
