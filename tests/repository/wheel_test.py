"""The Bazel-built wheel matches the meson-built one and is well formed.

Needs two wheels, named by the environment (tools/ci_bazel.sh sets both):
ENTANGLE_JAX_BAZEL_WHEEL (from `bazel build //:wheel`) and
ENTANGLE_JAX_MESON_WHEEL (from `pip wheel .`, built without CUDA), both built
for the interpreter that runs this test. Skipped, saying so, when they are
not given.
"""

import base64
import email.parser
import hashlib
import os
import pathlib
import re
import sys
import sysconfig
import tomllib
import unittest
import zipfile

from absl.testing import absltest

BAZEL_WHEEL = os.environ.get("ENTANGLE_JAX_BAZEL_WHEEL", "")
MESON_WHEEL = os.environ.get("ENTANGLE_JAX_MESON_WHEEL", "")
# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
WHEEL_NAME = re.compile(
  r"^(?P<dist>[A-Za-z0-9_.]+)-(?P<version>[^-]+)(-\d[^-]*)?"
  r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


ROOT = pathlib.Path(__file__).resolve().parents[2]
# Where the documentation lists the wheel's files: the fenced block after
# this marker, with the extension suffix written as EXT.
WHEEL_FILES_MARKER = "<!-- wheel files -->"


def documented_files() -> set[str]:
  """The wheel's files as the documentation lists them (README.md or a page
  under docs/), for this interpreter's extension suffix."""
  pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
  for page in pages:
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    if WHEEL_FILES_MARKER in text:
      block = text.split(WHEEL_FILES_MARKER, 1)[1].split("```")[1]
      suffix = sysconfig.get_config_var("EXT_SUFFIX")
      return {line.replace("EXT", suffix) for line in block.split()}
  raise AssertionError(f"no page holds {WHEEL_FILES_MARKER!r}")


def dist_info(archive: zipfile.ZipFile) -> str:
  (name,) = {n.split("/")[0] for n in archive.namelist() if ".dist-info/" in n}
  return name


def metadata(archive: zipfile.ZipFile):
  text = archive.read(f"{dist_info(archive)}/METADATA").decode()
  return email.parser.Parser().parsestr(text)


def entry_points(archive: zipfile.ZipFile) -> dict[str, dict[str, str]]:
  """entry_points.txt as {group: {name: value}}; {} without one."""
  name = f"{dist_info(archive)}/entry_points.txt"
  if name not in archive.namelist():
    return {}
  groups: dict[str, dict[str, str]] = {}
  group = None
  for line in archive.read(name).decode().splitlines():
    if line.startswith("[") and line.endswith("]"):
      group = groups.setdefault(line[1:-1], {})
    elif line.strip():
      assert group is not None, f"{name}: an entry before any [group]"
      key, value = line.split("=", 1)
      group[key.strip()] = value.strip()
  return groups


def package_files(archive: zipfile.ZipFile) -> set[str]:
  return {n for n in archive.namelist() if ".dist-info/" not in n}


@absltest.skipUnless(
  BAZEL_WHEEL and MESON_WHEEL,
  "set ENTANGLE_JAX_BAZEL_WHEEL and ENTANGLE_JAX_MESON_WHEEL",
)
class WheelTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.bazel = zipfile.ZipFile(BAZEL_WHEEL)
    self.meson = zipfile.ZipFile(MESON_WHEEL)
    self.addCleanup(self.bazel.close)
    self.addCleanup(self.meson.close)

  def test_same_package_files(self):
    self.assertEqual(package_files(self.bazel), package_files(self.meson))

  def test_package_files_are_the_documented_ones(self):
    # Both wheels are built without CUDA here (tools/ci_bazel.sh).
    self.assertEqual(package_files(self.meson), documented_files())

  def test_same_metadata(self):
    bazel, meson = metadata(self.bazel), metadata(self.meson)
    for field in ("Name", "Version", "Requires-Python", "Summary"):
      self.assertEqual(bazel[field], meson[field], field)
    for field in ("Requires-Dist", "Provides-Extra"):
      self.assertCountEqual(bazel.get_all(field), meson.get_all(field), field)

  def test_license_files_in_dist_info(self):
    # PEP 639: pyproject.toml's license-files, under .dist-info/licenses/,
    # with the repository's bytes; METADATA names them and the licence.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for archive in (self.bazel, self.meson):
      prefix = f"{dist_info(archive)}/licenses/"
      for name in project["license-files"]:
        self.assertEqual(
          archive.read(prefix + name), (ROOT / name).read_bytes(), name
        )
      meta = metadata(archive)
      self.assertEqual(meta["License-Expression"], project["license"])
      self.assertEqual(meta.get_all("License-File"), project["license-files"])

  def test_same_entry_points(self):
    # pytest finds the race check's plugin through them (pytest11).
    meson = entry_points(self.meson)
    self.assertIn("pytest11", meson)
    self.assertEqual(entry_points(self.bazel), meson)

  def test_same_tags(self):
    bazel = WHEEL_NAME.match(os.path.basename(BAZEL_WHEEL))
    meson = WHEEL_NAME.match(os.path.basename(MESON_WHEEL))
    self.assertIsNotNone(bazel)
    self.assertIsNotNone(meson)
    assert bazel and meson
    for part in ("dist", "version", "python", "abi", "platform"):
      self.assertEqual(bazel[part], meson[part], part)
    wheel = self.bazel.read(f"{dist_info(self.bazel)}/WHEEL").decode()
    tag = f"{bazel['python']}-{bazel['abi']}-{bazel['platform']}"
    self.assertIn(f"Tag: {tag}", wheel)
    self.assertIn("Root-Is-Purelib: false", wheel)

  def test_tagged_for_this_interpreter(self):
    # CI runs this test with the interpreter both wheels were built for.
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for path in (BAZEL_WHEEL, MESON_WHEEL):
      name = WHEEL_NAME.match(os.path.basename(path))
      assert name is not None, path
      self.assertEqual((name["python"], name["abi"]), (tag, tag), path)

  def test_record_lists_every_file_with_its_hash(self):
    record_name = f"{dist_info(self.bazel)}/RECORD"
    rows = [
      line.split(",")
      for line in self.bazel.read(record_name).decode().splitlines()
    ]
    listed = {path for path, _, _ in rows}
    self.assertEqual(listed, set(self.bazel.namelist()))
    for path, digest, size in rows:
      if path == record_name:
        self.assertEqual((digest, size), ("", ""))
        continue
      data = self.bazel.read(path)
      expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
      self.assertEqual(digest, "sha256=" + expected.rstrip(b"=").decode())
      self.assertEqual(int(size), len(data))


if __name__ == "__main__":
  absltest.main()


class DocumentedFilesTest(absltest.TestCase):
  """The documented list holds the checkout's package sources, so that
  adding or moving a module fails here, not only in CI's wheel builds."""

  def test_the_list_names_every_source_file(self):
    sources = ROOT / "entangle_jax"
    if not sources.is_dir():
      raise unittest.SkipTest(f"no entangle_jax/ beside {ROOT / 'tests'}")
    found = {
      str(path.relative_to(ROOT))
      for pattern in ("*.py", "*.pyi", "py.typed")
      for path in sources.rglob(pattern)
      if "__pycache__" not in path.parts
    }
    generated = {"entangle_jax/_version.py"}  # From _version.py.in.
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    documented = {f for f in documented_files() if not f.endswith(suffix)}
    self.assertEqual(found - generated, documented - generated)
