"""The native sources compile against the installed jaxlib's own FFI headers.

The meson and Bazel builds compile against the pinned (oldest supported)
jaxlib's XLA FFI headers, but a Bazel project may pass its own (README,
"Inside a larger project"), usually its jaxlib's. So the sources must
compile against the headers of every jaxlib they support: jaxlib 0.11 (FFI
API 0.4), for one, renamed a type that the entangle handler walked its call
frame with. CI runs this file with jaxlib 0.6.2, 0.10.2 and 0.12.1.
"""

import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sysconfig

import jaxlib
import pybind11
from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"
JAXLIB_INCLUDE = pathlib.Path(jaxlib.__file__).parent / "include"
COMPILER = shutil.which(os.environ.get("CXX", "c++"))


def sources() -> list[pathlib.Path]:
  """Every C++ source file under native/ (the CUDA files need nvcc)."""
  return sorted(NATIVE.rglob("*.cc"))


@absltest.skipUnless(
  sources(),
  "needs the checkout's native/ sources, which an installed package lacks",
)
@absltest.skipUnless(COMPILER, "needs a C++ compiler (c++, or $CXX)")
class NativeHeadersTest(absltest.TestCase):
  def test_jaxlib_ships_the_ffi_headers(self):
    self.assertTrue(
      (JAXLIB_INCLUDE / "xla" / "ffi" / "api" / "c_api.h").is_file(),
      f"jaxlib {jaxlib.__version__} has no xla/ffi/api/c_api.h under "
      f"{JAXLIB_INCLUDE}",
    )

  def test_sources_compile_against_this_jaxlibs_headers(self):
    includes = {
      JAXLIB_INCLUDE,
      pathlib.Path(pybind11.get_include()),
      pathlib.Path(sysconfig.get_paths()["include"]),
      ROOT,
      NATIVE,
    } | {source.parent for source in sources()}
    flags = ["-std=c++17", "-fsyntax-only"]
    flags += [f"-I{include}" for include in sorted(includes)]
    assert COMPILER is not None
    compiler: str = COMPILER

    def compile_one(source: pathlib.Path) -> subprocess.CompletedProcess[str]:
      command = [compiler, *flags, str(source)]
      return subprocess.run(command, capture_output=True, text=True)

    # The files compile independently: two at a time halves the wait.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
      results = list(pool.map(compile_one, sources()))
    for source, result in zip(sources(), results, strict=True):
      with self.subTest(source=source.relative_to(ROOT).as_posix()):
        self.assertEqual(
          result.returncode,
          0,
          f"{source.name} does not compile against jaxlib "
          f"{jaxlib.__version__}'s FFI headers:\n{result.stderr[-4000:]}",
        )


if __name__ == "__main__":
  absltest.main()
