"""The licence texts are in the repository, the sdist and every wheel.

LICENSE is the Apache License 2.0 that pyproject.toml's `license` names;
THIRD_PARTY_NOTICES carries the licences of what the compiled extensions
contain. pyproject.toml lists both as `license-files` (PEP 639), so
meson-python puts them at the sdist's root and under the wheel's
.dist-info/licenses/, and Bazel's //:wheel takes the same list
(tools/bazel/project_config.bzl). The sdist is built here (`uv build
--sdist`, about 12 s: meson's dist archives the committed tree, so what is
checked is HEAD's); the wheels CI builds are checked by wheel_test.py.
"""

import email.parser
import importlib.metadata
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import unittest
import zipfile

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD_WHEEL = ROOT / "tools" / "bazel" / "build_wheel.py"


def words(text: str) -> list[str]:
  """`text` as words: licence texts compared with their line breaks and
  indentation left out."""
  return text.split()


def project() -> dict:
  return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def check_carries_license_files(
  test: absltest.TestCase, read, names: list[str], prefix: str
) -> None:
  """Each of pyproject.toml's license files is `prefix` + its path in the
  archive that `read(name)` reads, with the repository's bytes."""
  for name in project()["license-files"]:
    member = prefix + name
    test.assertIn(member, names)
    test.assertEqual(read(member), (ROOT / name).read_bytes(), member)


class RepositoryTest(absltest.TestCase):
  def test_license_is_the_apache_license_named_in_pyproject(self):
    self.assertEqual(project()["license"], "Apache-2.0")
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    self.assertEqual(
      words(text)[:5], ["Apache", "License", "Version", "2.0,", "January"]
    )
    # The nine numbered sections of its terms, in order.
    sections = [
      "Definitions.",
      "Grant of Copyright License.",
      "Grant of Patent License.",
      "Redistribution.",
      "Submission of Contributions.",
      "Trademarks.",
      "Disclaimer of Warranty.",
      "Limitation of Liability.",
      "Accepting Warranty or Additional Liability.",
    ]
    at = 0
    for number, title in enumerate(sections, start=1):
      found = text.find(f"{number}. {title}", at)
      self.assertGreater(found, at, f"section {number}, {title!r}")
      at = found
    self.assertIn("END OF TERMS AND CONDITIONS", text[at:])

  def test_license_files_exist(self):
    listed = project()["license-files"]
    self.assertEqual(listed, ["LICENSE", "THIRD_PARTY_NOTICES"])
    for name in listed:
      self.assertTrue((ROOT / name).is_file(), name)

  def test_notices_hold_pybind11s_licence_as_pybind11_ships_it(self):
    try:
      dist = importlib.metadata.distribution("pybind11")
    except importlib.metadata.PackageNotFoundError:
      self.skipTest("pybind11 is not installed here")
    licence = [f for f in dist.files or [] if f.name == "LICENSE"]
    if not licence:
      self.skipTest("this pybind11 ships no LICENSE file")
    shipped = words(licence[0].read_text())
    notices = words((ROOT / "THIRD_PARTY_NOTICES").read_text())
    starts = [
      i for i in range(len(notices)) if notices[i : i + len(shipped)] == shipped
    ]
    self.assertLen(starts, 1, "pybind11's licence, word for word")

  def test_notices_name_every_compiled_in_project(self):
    text = (ROOT / "THIRD_PARTY_NOTICES").read_text()
    for name in ("pybind11", "XLA FFI headers", "libc++", "LLVM Exceptions"):
      self.assertIn(name, text)
    # Every extension meson.build builds is named, so that a new one makes
    # this test ask whether the notices still cover it.
    meson = (ROOT / "meson.build").read_text()
    extensions = [
      line.split("'")[1]
      for line in meson.splitlines()
      if line.strip().startswith("'_") and line.strip().endswith("_ffi',")
    ]
    self.assertNotEmpty(extensions)
    for extension in extensions:
      self.assertIn(extension, text)


class BazelWheelBuilderTest(absltest.TestCase):
  """tools/bazel/build_wheel.py, which //:wheel runs, writes the licence
  files and their metadata as meson-python does."""

  def temp_dir(self) -> pathlib.Path:
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    return pathlib.Path(folder.name)

  def test_license_files_and_expression(self):
    out = self.temp_dir() / "x-1-py3-none-any.whl"
    args = ["--output", str(out), "--distribution", "x", "--version", "1"]
    args += ["--tag", "py3-none-any", "--license", "Apache-2.0"]
    for name in project()["license-files"]:
      args += ["--license-file", f"{name}={ROOT / name}"]
    subprocess.run([sys.executable, str(BUILD_WHEEL), *args], check=True)
    with zipfile.ZipFile(out) as wheel:
      check_carries_license_files(
        self, wheel.read, wheel.namelist(), "x-1.dist-info/licenses/"
      )
      meta = email.parser.Parser().parsestr(
        wheel.read("x-1.dist-info/METADATA").decode()
      )
      record = wheel.read("x-1.dist-info/RECORD").decode()
    self.assertEqual(meta["Metadata-Version"], "2.4")
    self.assertEqual(meta["License-Expression"], "Apache-2.0")
    self.assertEqual(meta.get_all("License-File"), project()["license-files"])
    self.assertIn("x-1.dist-info/licenses/LICENSE,sha256=", record)

  def test_a_license_file_without_a_name_is_refused(self):
    out = self.temp_dir() / "x.whl"
    result = subprocess.run(
      [
        *(sys.executable, str(BUILD_WHEEL), "--output", str(out)),
        *("--distribution", "x", "--version", "1", "--tag", "py3-none-any"),
        *("--license-file", str(ROOT / "LICENSE")),
      ],
      capture_output=True,
      text=True,
    )
    self.assertNotEqual(result.returncode, 0)
    self.assertIn("is not NAME=SOURCE_PATH", result.stderr)
    self.assertIn(str(ROOT / "LICENSE"), result.stderr)


@unittest.skipUnless(
  shutil.which("uv") and (ROOT / ".git").exists(),
  "builds the sdist with uv from a git checkout",
)
class SdistTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out = tempfile.mkdtemp()
    subprocess.run(
      ["uv", "build", "-q", "--no-config", "--sdist", "--out-dir", cls.out],
      cwd=ROOT,
      check=True,
    )
    (cls.sdist,) = pathlib.Path(cls.out).glob("entangle_jax-*.tar.gz")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.out)
    super().tearDownClass()

  def test_license_files_at_the_root(self):
    top = self.sdist.name.removesuffix(".tar.gz")
    with tarfile.open(self.sdist) as sdist:

      def read(member: str) -> bytes:
        f = sdist.extractfile(member)
        assert f is not None, member
        return f.read()

      check_carries_license_files(self, read, sdist.getnames(), f"{top}/")
      meta = email.parser.Parser().parsestr(read(f"{top}/PKG-INFO").decode())
    self.assertEqual(meta["License-Expression"], project()["license"])
    self.assertEqual(meta.get_all("License-File"), project()["license-files"])


if __name__ == "__main__":
  absltest.main()
