"""The dump watch's files: what it asks XLA to write, how it finds the
optimized modules, and what its pruning deletes. No compile here: XLA reads
its flags once per process (the plugin's tests dump for real)."""

import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest

from entangle_jax.testing._findings.records import Findings, ModuleResult
from entangle_jax.testing._ways_in import dump_watch as _dump_watch
from entangle_jax.testing._ways_in import module_files

LEAN = "--xla_dump_buffer_assignment_analysis=false"


def flags() -> list[str]:
  return os.environ["XLA_FLAGS"].split()


class RequestDumpTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.dict(os.environ))
    os.environ.pop("XLA_FLAGS", None)
    self.tmp = pathlib.Path(tempfile.mkdtemp())

  def test_a_dump_of_its_own_leaves_out_what_the_check_does_not_read(self):
    self.enter_context(
      mock.patch.object(_dump_watch, "_knows_lean_flags", return_value=True)
    )
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"
    dump = _dump_watch.request_dump(into=self.tmp / "gw0")
    self.assertEqual(dump, self.tmp / "gw0")
    self.assertEqual(
      flags(),
      [
        "--xla_cpu_enable_fast_math=false",
        f"--xla_dump_to={dump}",
        "--xla_dump_hlo_as_text",
        LEAN,
      ],
    )
    os.environ["XLA_FLAGS"] = ""
    dump = _dump_watch.request_dump(prefix="watch-test-")
    self.addCleanup(dump.rmdir)
    self.assertIn(LEAN, flags())

  def test_a_dump_the_user_asked_for_gets_everything(self):
    # Control: the user's dump, or a worker's folder below it, is theirs.
    asked = f"--xla_dump_to={self.tmp}"
    os.environ["XLA_FLAGS"] = asked
    self.assertEqual(_dump_watch.request_dump(), self.tmp)
    self.assertEqual(flags(), [asked, "--xla_dump_hlo_as_text"])
    os.environ["XLA_FLAGS"] = asked
    _dump_watch.request_dump(into=self.tmp / "gw1")
    self.assertNotIn(LEAN, flags())

  def test_a_jaxlib_that_does_not_know_the_flags_gets_none(self):
    # XLA aborts the process on a flag it does not know (jaxlib 0.6.2's).
    for version, known in (
      ("0.6.2", False),
      ("0.9.1", False),
      ("0.10.2", True),
    ):
      with mock.patch.object(
        _dump_watch.importlib.metadata, "version", return_value=version
      ):
        os.environ["XLA_FLAGS"] = ""
        _dump_watch.request_dump(into=self.tmp / version)
        self.assertEqual(LEAN in flags(), known, version)

  def test_the_users_own_setting_of_a_lean_flag_stands(self):
    os.environ["XLA_FLAGS"] = "--xla_dump_buffer_assignment_analysis=true"
    _dump_watch.request_dump(into=self.tmp)
    self.assertIn("--xla_dump_buffer_assignment_analysis=true", flags())
    self.assertNotIn(LEAN, flags())

  def test_never_a_flag_that_drops_the_metadata(self):
    self.assertNotIn(
      "--xla_dump_disable_metadata",
      " ".join(flag.split("=")[0] for flag in _dump_watch.LEAN_FLAGS),
    )


def write(path: pathlib.Path, text: str = "") -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text)
  return path


def module(folder: pathlib.Path, n: int, *extra: str) -> pathlib.Path:
  """A module's files as XLA names them; returns its optimized module."""
  stem = folder / f"module_{n:04d}.jit_f"
  write(stem / "module.mlir")
  for suffix in ("before_optimizations.txt", *extra):
    write(folder / f"{stem.name}.{suffix}")
  return write(folder / f"{stem.name}.cpu_after_optimizations.txt")


def result(path: pathlib.Path, races: bool) -> ModuleResult:
  # A race's content does not matter to the pruning, only that there is one.
  return ModuleResult(
    str(path), "jit_f", None, 2, Findings(pairs=(mock.sentinel.race,) * races)
  )


class DumpWatchFilesTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.dump = pathlib.Path(tempfile.mkdtemp())

  def test_finds_what_rglob_finds(self):
    module(self.dump, 1, "cpu_after_optimizations-buffer-assignment.txt")
    module(self.dump / "gw0", 2)
    write(self.dump / "gw0" / "deeper" / "x.gpu_after_optimizations.txt")
    write(self.dump / "notes.txt")
    found = sorted(_dump_watch.optimized_files(self.dump))
    self.assertEqual(found, sorted(self.dump.rglob(module_files.OPTIMIZED)))
    self.assertLen(found, 3)
    self.assertEqual(_dump_watch.optimized_files(self.dump / "absent"), [])

  def test_pruning_deletes_clean_modules_and_keeps_racing_ones(self):
    watch = _dump_watch.DumpWatch(self.dump, prune=True)
    clean = module(
      self.dump, 1, "cpu_after_optimizations-memory-usage-report.txt"
    )
    racing = module(self.dump, 2)
    watch.results += [result(clean, False), result(racing, True)]
    watch.finish()
    left = {p.name.split(".")[0] for p in self.dump.iterdir()}
    self.assertEqual(left, {"module_0002"})
    # A later check, and files XLA wrote for the clean module after its
    # check: the next step deletes them too, the racing module's never.
    write(self.dump / "module_0001.jit_f.obj-file.fusion.o")
    later = module(self.dump, 3)
    watch.results.append(result(later, False))
    watch.finish()
    left = {p.name.split(".")[0] for p in self.dump.iterdir()}
    self.assertEqual(left, {"module_0002"})
    self.assertTrue(racing.is_file())

  def test_without_pruning_nothing_is_deleted(self):
    watch = _dump_watch.DumpWatch(self.dump)
    clean = module(self.dump, 1)
    watch.results.append(result(clean, False))
    watch.finish()
    self.assertTrue(clean.is_file())


if __name__ == "__main__":
  absltest.main()
