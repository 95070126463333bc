"""Where a new dump directory goes: the tmpfs when it is usable, Bazel's
outputs folder and a temporary directory the user set before it. The tmpfs
is a folder of the test's own (`dump_place.TMPFS` and `free_bytes` patched),
never this machine's /dev/shm."""

import os
import pathlib
import shutil
import tempfile
import time
from unittest import mock

from absl.testing import absltest

from entangle_jax.testing._ways_in import dump_place
from entangle_jax.testing._ways_in import dump_watch as _dump_watch

DOCKER_SHM = 64 * 1024 * 1024  # Docker's default /dev/shm.


class DumpParentTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.dict(os.environ))
    for name in (
      "TEST_UNDECLARED_OUTPUTS_DIR",
      "XLA_FLAGS",
      *dump_place.TEMP_ENV,
    ):
      os.environ.pop(name, None)
    self.tmpfs = self.folder()
    self.enter_context(mock.patch.object(dump_place, "TMPFS", self.tmpfs))
    self.free = self.enter_context(
      mock.patch.object(
        dump_place, "free_bytes", return_value=dump_place.MIN_FREE
      )
    )

  def folder(self) -> pathlib.Path:
    made = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, made, ignore_errors=True)
    return made

  def test_a_usable_tmpfs_takes_a_dump_its_owner_removes(self):
    self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs)
    dump = _dump_watch.new_dump(tmpfs=True)
    self.assertEqual(dump.parent, self.tmpfs)
    self.assertTrue(dump.name.startswith("entangle-races-"))
    self.free.assert_called_with(self.tmpfs)
    # The plugin's way: XLA is asked to dump there.
    asked = _dump_watch.request_dump(tmpfs=True)
    self.assertEqual(asked.parent, self.tmpfs)
    self.assertIn(f"--xla_dump_to={asked}", os.environ["XLA_FLAGS"])

  def test_a_dump_nobody_removes_stays_off_the_tmpfs(self):
    # race_check's dump keeps everything XLA writes: on a tmpfs it would
    # hold memory until the machine restarts.
    self.assertIsNone(dump_place.dump_parent())
    dump = _dump_watch.new_dump(prefix="place-test-")
    self.addCleanup(shutil.rmtree, dump, ignore_errors=True)
    self.assertNotEqual(dump.parent, self.tmpfs)
    self.assertEqual(dump.parent, pathlib.Path(tempfile.gettempdir()))
    # Control: the same tmpfs takes the dump that asks for it.
    self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs)

  def test_a_tmpfs_with_too_little_free_space_is_passed_over(self):
    for free in (0, DOCKER_SHM, dump_place.MIN_FREE - 1):
      self.free.return_value = free
      self.assertIsNone(dump_place.usable_tmpfs(), free)
      self.assertIsNone(dump_place.dump_parent(tmpfs=True), free)
    # Control: at the threshold, and above it, the tmpfs is used.
    for free in (dump_place.MIN_FREE, 24 * dump_place.MIN_FREE):
      self.free.return_value = free
      self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs, free)

  def test_an_absent_tmpfs_is_passed_over(self):
    absent = self.tmpfs / "absent"
    not_a_folder = self.tmpfs / "a-file"
    not_a_folder.write_text("")
    for path in (absent, not_a_folder):
      with mock.patch.object(dump_place, "TMPFS", path):
        self.assertIsNone(dump_place.usable_tmpfs(), path)
        dump = _dump_watch.new_dump(prefix="place-test-", tmpfs=True)
        self.addCleanup(shutil.rmtree, dump, ignore_errors=True)
        self.assertEqual(dump.parent, pathlib.Path(tempfile.gettempdir()))
    # Control: the folder that is there.
    self.assertEqual(dump_place.usable_tmpfs(), self.tmpfs)

  def test_a_tmpfs_this_process_cannot_write_is_passed_over(self):
    # Patched: as root, os.access says yes to any mode bits.
    with mock.patch.object(dump_place.os, "access", return_value=False):
      self.assertIsNone(dump_place.usable_tmpfs())
    self.assertEqual(dump_place.usable_tmpfs(), self.tmpfs)  # Control.

  def test_a_tmpfs_that_cannot_be_read_is_passed_over(self):
    self.free.side_effect = PermissionError("statvfs")
    self.assertIsNone(dump_place.usable_tmpfs())
    self.free.side_effect = None
    self.assertEqual(dump_place.usable_tmpfs(), self.tmpfs)  # Control.

  def test_bazels_outputs_folder_comes_first(self):
    outputs = self.folder()
    os.environ["TEST_UNDECLARED_OUTPUTS_DIR"] = str(outputs)
    for tmpfs in (True, False):
      self.assertEqual(dump_place.dump_parent(tmpfs=tmpfs), outputs)
    self.assertEqual(_dump_watch.new_dump(tmpfs=True).parent, outputs)
    # Control: without it (or set empty), the tmpfs.
    os.environ["TEST_UNDECLARED_OUTPUTS_DIR"] = ""
    self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs)
    del os.environ["TEST_UNDECLARED_OUTPUTS_DIR"]
    self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs)

  def test_a_temporary_directory_the_user_set_comes_before_the_tmpfs(self):
    for name in dump_place.TEMP_ENV:
      with mock.patch.dict(os.environ, {name: str(self.folder())}):
        self.assertIsNone(dump_place.dump_parent(tmpfs=True), name)
      # Control: set empty, it is not set (as tempfile reads it).
      with mock.patch.dict(os.environ, {name: ""}):
        self.assertEqual(dump_place.dump_parent(tmpfs=True), self.tmpfs)
    # Bazel's outputs folder still comes before it.
    outputs = self.folder()
    with mock.patch.dict(
      os.environ,
      {
        "TMPDIR": str(self.folder()),
        "TEST_UNDECLARED_OUTPUTS_DIR": str(outputs),
      },
    ):
      self.assertEqual(dump_place.dump_parent(tmpfs=True), outputs)

  def test_a_tmpfs_that_refuses_the_folder_falls_back(self):
    # Usable when asked, gone when the folder is made: the temporary
    # directory, as without it.
    gone = self.tmpfs / "gone"
    self.enter_context(mock.patch.object(dump_place, "TMPFS", gone))
    self.enter_context(
      mock.patch.object(dump_place, "usable_tmpfs", return_value=gone)
    )
    self.assertEqual(dump_place.dump_parent(tmpfs=True), gone)
    dump = _dump_watch.new_dump(prefix="place-test-", tmpfs=True)
    self.addCleanup(shutil.rmtree, dump, ignore_errors=True)
    self.assertEqual(dump.parent, pathlib.Path(tempfile.gettempdir()))
    # Control: a Bazel outputs folder that is not there is an error, not
    # passed over (Bazel made it; the dump belongs there).
    os.environ["TEST_UNDECLARED_OUTPUTS_DIR"] = str(self.tmpfs / "no-outputs")
    with self.assertRaises(OSError):
      _dump_watch.new_dump(prefix="place-test-", tmpfs=True)


class StaleDumpsTest(absltest.TestCase):
  """Kept dumps of earlier runs beyond the newest `KEPT_DUMPS` go when a
  new dump is made, unless changed within `IDLE_SECONDS`."""

  def setUp(self):
    super().setUp()
    self.parent = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.parent, ignore_errors=True)
    self.now = 1_000_000_000.0

  def dump(self, name: str, age: float) -> pathlib.Path:
    folder = self.parent / name
    (folder / "gw0").mkdir(parents=True)
    (folder / "gw0" / "module_0001.jit_f.cpu_after_optimizations.txt").touch()
    stamp = self.now - age
    for path in (folder / "gw0", folder):
      os.utime(path, (stamp, stamp))
    return folder

  def test_old_dumps_beyond_the_newest_go(self):
    hour = dump_place.IDLE_SECONDS
    old = [self.dump(f"entangle-races-{i}", (i + 2) * hour) for i in range(8)]
    removed = dump_place.remove_stale_dumps(
      self.parent, "entangle-races-", self.now
    )
    keep = dump_place.KEPT_DUMPS
    self.assertCountEqual(removed, old[keep:])
    for path in old[:keep]:
      self.assertTrue(path.is_dir(), path)
    for path in old[keep:]:
      self.assertFalse(path.exists(), path)

  def test_recent_and_other_folders_stay(self):
    """The controls: a dump changed within the hour (a run still going),
    a folder of another name, and a file of the dump's name."""
    for i in range(dump_place.KEPT_DUMPS):
      self.dump(f"entangle-races-new{i}", 60.0)
    recent = self.dump("entangle-races-busy", 600.0)
    other = self.dump("someone-elses-7", 10 * dump_place.IDLE_SECONDS)
    plain = self.parent / "entangle-races-file"
    plain.touch()
    removed = dump_place.remove_stale_dumps(
      self.parent, "entangle-races-", self.now
    )
    self.assertEqual(removed, [])
    for path in (recent, other, plain):
      self.assertTrue(path.exists(), path)

  def test_a_new_dump_removes_them(self):
    with mock.patch.dict(os.environ, {"TMPDIR": str(self.parent)}):
      for name in ("TEST_UNDECLARED_OUTPUTS_DIR", "TEMP", "TMP"):
        os.environ.pop(name, None)
      tempfile.tempdir = None
      self.addCleanup(setattr, tempfile, "tempdir", None)
      self.now = time.time()
      old = [
        self.dump(f"entangle-races-{i}", (i + 2) * dump_place.IDLE_SECONDS)
        for i in range(dump_place.KEPT_DUMPS + 2)
      ]
      made = _dump_watch.new_dump()
    self.assertEqual(made.parent, self.parent)
    self.assertFalse(old[-1].exists())
    self.assertTrue(old[0].exists())


if __name__ == "__main__":
  absltest.main()
