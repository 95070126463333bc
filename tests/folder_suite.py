"""Runs several absltest files in one process, as pytest runs the whole
suite: the test modules named in ENTANGLE_JAX_TEST_MODULES (comma
separated, dotted from the repository's root), their test classes
gathered here for absltest.

`bazel test //...` runs each tests/ folder this way (tests/BUILD.bazel's
``*_tests`` targets), and the files that have shard counts of their own:
a process costs the import of jax and its runfiles' sandbox, about 2.5 s
of a core each, and one per file made that the largest part of CI's
Bazel lane. Each file keeps a target of its own, run by name
(``bazel test //tests:rule_table_test``).

Sharding (Bazel's TEST_TOTAL_SHARDS and TEST_SHARD_INDEX) is done here,
not by absltest: absltest deals the methods out one by one, so a class
with a method in every shard ran its ``setUpClass`` (a compile, a dump,
a fresh interpreter) once per shard. Here each shard gets whole the classes
that have a set-up of their own and are no more than a shard's share of
the methods (`deal`); the other classes are dealt out method by method."""

import os
import sys

# Run as a script, Python put this file's folder, tests/ (where a symlink
# to this file leads: the source tree, under Bazel), first on the path,
# where tests/resource/ would shadow the standard library's `resource`
# (and any other folder one of its modules): the test modules are
# imported by their full names (``tests.order.rule_table_test``) from the
# root. (Imported, as its test imports it, it leaves the path alone.)
if __name__ == "__main__":
  _HERE = {
    os.path.dirname(os.path.realpath(__file__)),
    os.path.realpath(os.path.dirname(__file__)),
  }
  sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") not in _HERE]

import importlib
import unittest

from absl.testing import absltest

MODULES_ENV = "ENTANGLE_JAX_TEST_MODULES"

Unit = tuple[str, tuple[str, ...]]
"""A class's name in the gathered globals and the methods that go
together into one shard."""


def gather(names: list[str], into: dict) -> int:
  """Imports each module of `names` and puts the test classes it defines
  into `into` (a module's globals), each under its module's name and its
  own, so that two files' classes of one name both run: how many."""
  count = 0
  for name in names:
    module = importlib.import_module(name)
    for attribute, value in vars(module).items():
      if (
        isinstance(value, type)
        and issubclass(value, absltest.TestCase)
        and value.__module__ == module.__name__
      ):
        into[f"{name.replace('.', '_')}__{attribute}"] = value
        count += 1
  return count


def deal(
  methods: dict[str, list[str]],
  shards: int,
  whole: frozenset[str] = frozenset(),
) -> list[list[Unit]]:
  """`methods` (each class's test methods, by the class's name) dealt
  into `shards` lists, each test once.

  A class named in `whole` (one with a ``setUpClass`` of its own) that
  has no more methods than a shard's share (all methods over `shards`,
  rounded up) stays whole, so that its set-up runs in one shard; any
  other class is split into single methods, as absltest deals them (two
  slow methods of a class with nothing to share stay apart). The units go,
  largest first, each to the shard with the fewest methods so far (the
  lowest index among equals), so every shard computes the same deal.
  Raises ValueError where a shard would get no test: Python's unittest
  fails a run of none."""
  if shards < 1:
    raise ValueError(f"shards must be at least 1, got {shards}")
  total = sum(len(names) for names in methods.values())
  share = -(-total // shards)
  units: list[Unit] = []
  for cls, names in sorted(methods.items()):
    if cls in whole and len(names) <= share:
      units.append((cls, tuple(names)))
    else:
      units.extend((cls, (name,)) for name in names)
  units.sort(key=lambda unit: -len(unit[1]))  # stable: names break ties
  dealt: list[list[Unit]] = [[] for _ in range(shards)]
  loads = [0] * shards
  for unit in units:
    lightest = loads.index(min(loads))
    dealt[lightest].append(unit)
    loads[lightest] += len(unit[1])
  empty = [i for i, units_of in enumerate(dealt) if not units_of]
  if empty:
    raise ValueError(
      f"{shards} shards for {total} test methods leave shard(s) {empty} "
      "empty: give the target fewer shards (tests/BUILD.bazel)"
    )
  return dealt


class _OneShardLoader(absltest.TestLoader):
  """Loads only the methods `deal` gave this shard."""

  def __init__(self, chosen: dict[type[unittest.TestCase], set[str]]):
    super().__init__()
    self._chosen = chosen

  def getTestCaseNames(self, testCaseClass):
    names = super().getTestCaseNames(testCaseClass)
    keep = self._chosen.get(testCaseClass, set())
    return [name for name in names if name in keep]


def shard_loader(
  classes: dict[str, type[unittest.TestCase]],
) -> absltest.TestLoader | None:
  """A loader for this process's shard of `classes` (by their names in
  the gathered globals), or None where Bazel asked for no sharding. Takes
  Bazel's sharding variables out of the environment, so that absltest
  does not deal the methods out again; it still writes the status file
  that tells Bazel the test shards itself."""
  total = os.environ.pop("TEST_TOTAL_SHARDS", None)
  index = os.environ.pop("TEST_SHARD_INDEX", None)
  if total is None or int(total) <= 1:
    return None
  plain = unittest.TestLoader()
  methods = {
    name: list(plain.getTestCaseNames(cls)) for name, cls in classes.items()
  }
  base = absltest.TestCase.setUpClass.__func__
  whole = frozenset(
    name
    for name, cls in classes.items()
    if getattr(cls.setUpClass, "__func__", None) is not base
  )
  mine = deal(methods, int(total), whole)[int(index or 0)]
  chosen: dict[type[unittest.TestCase], set[str]] = {}
  for name, method_names in mine:
    chosen.setdefault(classes[name], set()).update(method_names)
  return _OneShardLoader(chosen)


if __name__ == "__main__":
  names = [n for n in os.environ.get(MODULES_ENV, "").split(",") if n]
  if not names:
    sys.exit(f"{MODULES_ENV} names no test module")
  gathered: dict[str, type[unittest.TestCase]] = {}
  gather(names, gathered)
  globals().update(gathered)
  loader = shard_loader(gathered)
  if loader is None:
    absltest.main()
  else:
    absltest.main(testLoader=loader)
