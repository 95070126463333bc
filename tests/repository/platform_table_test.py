"""A new platform is a row of the platform table plus its kernel module
(issue 69): no other file of the package decides by a platform's name.

``entangle_jax/_src/targets/platforms.py`` holds every fact a stage needs
of a platform; the stages look a platform up there and read its row. A
file that compared a name against ``"tpu"`` (or passed ``platform="tpu"``
to a registration) would be one more file a new platform has to touch,
and these tests fail."""

import ast
import pathlib
import tempfile
import unittest

from absl.testing import absltest

from entangle_jax._src.targets import platforms
from tests.repository.import_layers_test import PACKAGE, ROOT

TABLE = PACKAGE / "_src" / "targets" / "platforms.py"

KERNELS = frozenset(
  ROOT.joinpath(*row.kernel.split(".")).with_suffix(".py")
  for row in platforms.PLATFORMS
  if row.kernel is not None
)
"""The kernel modules the table names: they are their platform's own."""

NAMES = frozenset(
  name.lower()
  for row in platforms.PLATFORMS
  for name in (
    row.name,
    *row.jax_names,
    *row.xla_names,
    *row.dump_words,
    *([row.ffi_name] if row.ffi_name else []),
  )
)
"""Every name the table knows a platform by (``cpu``, ``gpu``, ``host``,
``tpu``...), in lower case."""


def _names_a_platform(node: ast.AST) -> bool:
  """Whether `node` is a platform's name, or a tuple, list or set of
  strings that holds one."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value.lower() in NAMES
  if isinstance(node, ast.Tuple | ast.List | ast.Set):
    return any(_names_a_platform(e) for e in node.elts)
  return False


def deciding_by_name(path: pathlib.Path) -> list[int]:
  """The lines where the code of `path` decides by a platform's name: a
  comparison with one (``==``, ``in``...), or a ``platform=`` keyword
  given one."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Compare):
      hit = any(_names_a_platform(n) for n in (node.left, *node.comparators))
    elif isinstance(node, ast.keyword):
      hit = node.arg == "platform" and _names_a_platform(node.value)
    else:
      continue
    if hit:
      found.append(node.lineno)
  return found


def outside_the_table(package: pathlib.Path) -> list[str]:
  """The places (``file:line``, the file relative to `package`) in
  `package`'s files, other than the table and the kernel modules, that
  decide by a platform's name."""
  own = {TABLE, *KERNELS}
  return [
    f"{path.relative_to(package)}:{line}"
    for path in sorted(package.rglob("*.py"))
    if path not in own
    for line in deciding_by_name(path)
  ]


class PlatformTableTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    if not PACKAGE.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")

  def test_the_table_and_its_kernel_modules_exist(self):
    self.assertTrue(TABLE.is_file(), TABLE)
    self.assertTrue(KERNELS, "the table names no kernel module")
    for kernel in KERNELS:
      self.assertTrue(kernel.is_file(), kernel)
    self.assertLessEqual({"cpu", "cuda", "rocm", "tpu", "gpu"}, NAMES)

  def test_no_file_outside_the_table_decides_by_a_platform_name(self):
    self.assertEqual(outside_the_table(PACKAGE), [])

  def test_the_guard_names_a_file_that_does(self):
    # Control: a stage that branches on "tpu", or registers a lowering
    # for it, is named; one that reads the row is not.
    with tempfile.TemporaryDirectory() as folder:
      stage = pathlib.Path(folder, "stage.py")
      stage.write_text(
        "def f(platform, row):\n"
        "  if platform.lower() == 'tpu':\n"
        "    return 1\n"
        "  if platform in ('host', 'cpu'):\n"
        "    return 2\n"
        "  register(f, platform='TPU')\n"
        "  return row.one_stream\n"
      )
      found = outside_the_table(pathlib.Path(folder))
    self.assertEqual(found, ["stage.py:2", "stage.py:4", "stage.py:6"])

  def test_each_row_answers_its_names(self):
    for row in platforms.PLATFORMS:
      self.assertIs(platforms.of_jax_name(row.name), row)
      for name in row.xla_names:
        self.assertIs(platforms.of_xla_name(name.upper()), row)
    # GPU: either maker's row, one runtime.
    gpu = platforms.of_jax_name("gpu")
    self.assertIsNotNone(gpu)
    assert gpu is not None
    self.assertEqual(gpu.runtime, platforms.GPU_RUNTIME)
    self.assertIsNone(platforms.of_jax_name("metal"))
    self.assertFalse(platforms.host_side("metal"))
    self.assertTrue(platforms.host_side("Host"))
    self.assertFalse(platforms.host_side("CUDA"))
    self.assertTrue(platforms.one_stream("tpu"))
    self.assertFalse(platforms.one_stream("Host"))


if __name__ == "__main__":
  absltest.main()
