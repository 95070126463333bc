"""Runs several absltest files in one process, as pytest runs the whole
suite: the test modules named in ENTANGLE_JAX_TEST_MODULES (comma
separated, dotted from the repository's root), their test classes
gathered here for absltest, whose sharding (Bazel's TEST_TOTAL_SHARDS)
then splits their methods among the shards.

`bazel test //...` runs each tests/ folder this way (tests/BUILD.bazel's
``*_tests`` targets): a process costs the import of jax and its runfiles'
sandbox, about 2.5 s of a core each, and one per file made that the
largest part of CI's Bazel lane. Each file keeps a target of its own,
run by name (``bazel test //tests:rule_table_test``)."""

import os
import sys

# Python put this file's folder, tests/ (where a symlink to this file
# leads: the source tree, under Bazel), first on the path, where
# tests/resource/ would shadow the standard library's `resource` (and
# any other folder one of its modules): the test modules are imported by
# their full names (``tests.order.rule_table_test``) from the root.
_HERE = {
  os.path.dirname(os.path.realpath(__file__)),
  os.path.realpath(os.path.dirname(__file__)),
}
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") not in _HERE]

import importlib  # noqa: E402

from absl.testing import absltest  # noqa: E402

MODULES_ENV = "ENTANGLE_JAX_TEST_MODULES"


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


if __name__ == "__main__":
  names = [n for n in os.environ.get(MODULES_ENV, "").split(",") if n]
  if not names:
    sys.exit(f"{MODULES_ENV} names no test module")
  gather(names, globals())
  absltest.main()
