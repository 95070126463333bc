"""tests/folder_suite.py shards a Bazel test target by whole classes, so
that a class's ``setUpClass`` (a compile, a dump, a fresh interpreter)
runs in one shard, where absltest's own sharding deals the methods out
one by one and runs it in every shard that got one."""

import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

from tests import folder_suite, test_util

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A module of two classes with set-ups that print, one of them large
# enough to be split.
MODULE = (
  """\
from absl.testing import absltest


class SmallTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    print("SETUP SmallTest", flush=True)

  def test_one(self):
    print("RAN SmallTest.test_one", flush=True)

  def test_two(self):
    print("RAN SmallTest.test_two", flush=True)


class LargeTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    print("SETUP LargeTest", flush=True)
"""
  + "".join(
    f"""
  def test_{k}(self):
    print("RAN LargeTest.test_{k}", flush=True)
"""
    for k in range(6)
  )
  + """

if __name__ == "__main__":
  absltest.main()
"""
)


class DealTest(absltest.TestCase):
  def test_every_method_once_small_classes_whole(self):
    methods = {
      "a": ["t1", "t2"],
      "b": ["t1", "t2", "t3", "t4", "t5"],
      "c": ["t1"],
      "d": ["t1", "t2", "t3"],
    }
    dealt = folder_suite.deal(methods, 3, frozenset(methods))
    self.assertLen(dealt, 3)
    seen = sorted(
      (cls, name) for shard in dealt for cls, names in shard for name in names
    )
    expected = sorted((c, n) for c, names in methods.items() for n in names)
    self.assertEqual(seen, expected)
    # 11 methods over 3 shards: a share is 4. Classes of 4 or fewer stay
    # in one shard; b (5) is split.
    for cls in ("a", "c", "d"):
      holding = [
        i for i, shard in enumerate(dealt) if any(c == cls for c, _ in shard)
      ]
      self.assertLen(holding, 1, cls)
    holding_b = {
      i for i, shard in enumerate(dealt) for c, _ in shard if c == "b"
    }
    self.assertLen(holding_b, 3)
    loads = [sum(len(n) for _, n in shard) for shard in dealt]
    self.assertLessEqual(max(loads) - min(loads), 1)

  def test_a_class_without_a_set_up_of_its_own_is_dealt_by_method(self):
    # Its methods share nothing, and two slow ones kept together made one
    # shard take 47 s of its 60 in CI (sanitize_test's PluginTest).
    dealt = folder_suite.deal({"slow": ["t1", "t2"], "other": ["t1", "t2"]}, 2)
    holding = [{n for c, n in shard if c == "slow"} for shard in dealt]
    self.assertEqual(sorted(map(len, holding)), [1, 1])
    # The control: with a set-up of its own, it stays whole.
    whole = folder_suite.deal(
      {"slow": ["t1", "t2"], "other": ["t1", "t2"]}, 2, frozenset({"slow"})
    )
    self.assertIn(("slow", ("t1", "t2")), [u for shard in whole for u in shard])

  def test_the_same_deal_in_every_shard(self):
    methods = {f"c{k}": [f"t{j}" for j in range(k % 4 + 1)] for k in range(9)}
    self.assertEqual(
      folder_suite.deal(methods, 4),
      folder_suite.deal(dict(reversed(methods.items())), 4),
    )

  def test_an_empty_shard_or_no_shard_is_refused(self):
    with self.assertRaisesRegex(ValueError, "fewer shards"):
      folder_suite.deal({"a": ["t1", "t2"]}, 3)
    with self.assertRaisesRegex(ValueError, "at least 1"):
      folder_suite.deal({"a": ["t1"]}, 0)


class UnderBazelShardingTest(absltest.TestCase):
  """The protocol as Bazel runs it: two shards, each a fresh process."""

  def run_shards(self, folder: pathlib.Path, command: list[str]) -> list[str]:
    lines = []
    for index in range(2):
      status = folder / f"status{index}"
      env = dict(
        test_util.child_env(),
        # The fake package first; then what this process imports from
        # (absl: Bazel's runfiles, or the venv).
        PYTHONPATH=os.pathsep.join([str(folder), *sys.path]),
        ENTANGLE_JAX_TEST_MODULES="fake_tests.cases_test",
        TEST_TOTAL_SHARDS="2",
        TEST_SHARD_INDEX=str(index),
        TEST_SHARD_STATUS_FILE=str(status),
      )
      done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
      )
      self.assertEqual(done.returncode, 0, done.stderr[-2000:])
      self.assertTrue(status.exists(), "the shard did not tell Bazel it shards")
      lines += [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("RAN", "SETUP"))
      ]
    return lines

  def test_each_set_up_runs_once_and_every_test_runs(self):
    with tempfile.TemporaryDirectory() as name:
      folder = pathlib.Path(name)
      (folder / "fake_tests").mkdir()
      (folder / "fake_tests" / "__init__.py").write_text("")
      (folder / "fake_tests" / "cases_test.py").write_text(MODULE)
      ours = self.run_shards(
        folder, [sys.executable, str(ROOT / "tests" / "folder_suite.py")]
      )
      ran = sorted(line for line in ours if line.startswith("RAN"))
      self.assertLen(ran, 8)
      self.assertLen(set(ran), 8)
      # LargeTest (6 of 8 methods, over the share of 4) is split, so its
      # set-up runs in both shards; SmallTest's runs once.
      self.assertEqual(ours.count("SETUP SmallTest"), 1)
      self.assertEqual(ours.count("SETUP LargeTest"), 2)
      # The control: absltest's own sharding runs SmallTest's set-up in
      # each shard that got one of its two methods.
      theirs = self.run_shards(
        folder, [sys.executable, str(folder / "fake_tests" / "cases_test.py")]
      )
      self.assertEqual(sorted(x for x in theirs if x.startswith("RAN")), ran)
      self.assertEqual(theirs.count("SETUP SmallTest"), 2)


if __name__ == "__main__":
  absltest.main()
