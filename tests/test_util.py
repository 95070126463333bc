"""Helpers the tests share: compiled programs, the hazard step, child
interpreters, and the device count they all run with (`NUM_CPU_DEVICES`).

Importing JAX, entangle_jax or a test module starts no backend
(tests/repository/imports_test.py checks), so the device count set up
before the first test (tests/conftest.py, or the Bazel test environment)
holds for all.
"""

import importlib
import importlib.metadata
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import unittest

import jax
import jax.numpy as jnp
from absl.testing import parameterized

from entangle_jax import testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering
from entangle_jax.testing import example_store, module_text
from tests import preloaded_child

NUM_CPU_DEVICES = 8
"""The host CPU devices every test has: tests/conftest.py sets them up under
pytest, ``JAX_NUM_CPU_DEVICES`` in tests/BUILD.bazel under Bazel."""

# From jax (and jaxlib) 0.8.2 on, compiled HLO records an op's whole Python
# stack, so the analysis names the user's line; up to 0.8.1 it records only
# the innermost frame, a library wrapper's (README, "Proving order in your
# tests"). The tests that name source lines expect one or the other.
FULL_STACK_JAX = (0, 8, 2)


def jax_version() -> tuple[int, ...]:
  """The running jax's version as numbers, e.g. (0, 9, 0, 1)."""
  return tuple(int(part) for part in re.findall(r"\d+", jax.__version__))


def records_full_stack() -> bool:
  """Whether this jax's HLO metadata holds every Python frame of an op."""
  return jax_version() >= FULL_STACK_JAX


WRITE = example_store.WRITE_SLOT_TARGET
READ = example_store.READ_SLOT_TARGET

# Parameters (ordering, whether the read precedes the second write).
ORDERED = parameterized.parameters(
  (Ordering.NONE, False), (Ordering.ENTANGLE, True)
)


def identity(payload, *witnesses):
  """The control for ordering tests: entangle's values, none of its order."""
  del witnesses
  return payload


def sharded_entangle(mesh: jax.sharding.Mesh):
  """``entangle(x, w)`` jitted with `x` split over `mesh`'s axis ``"x"``
  and `w` on every device; returns it with those two shardings."""
  from entangle_jax import entangle

  sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  fn = jax.jit(
    lambda x, w: entangle(x, w),
    in_shardings=(sharded, replicated),
    out_shardings=sharded,
  )
  return fn, sharded, replicated


def compiled(fn, *args) -> jax.stages.Compiled:
  """`fn` jitted and compiled for `args`."""
  return jax.jit(fn).lower(*args).compile()


def hazard_step(token, y, ordering):
  """One write -> read -> write round; returns the new token and payload.

  Ops are in the named scopes "first_write", "read" and "second_write";
  `ordering` (a demo ``Ordering``) says how the read is ordered before the
  second write.
  """
  with jax.named_scope("first_write"):
    token = testing.write_slot(token, jnp.float32(1.0))
  with jax.named_scope("read"):
    x = testing.read_slot(token)
  token, y, x = _hazard.order_after_read(ordering, token, x, y)
  with jax.named_scope("second_write"):
    token = testing.write_slot(token, jnp.float32(2.0))
  return token, y * x


def hlo_text(fn, *args, **jit_kwargs) -> str:
  """The optimized HLO of `jax.jit(fn, **jit_kwargs)` for `args`."""
  return module_text(jax.jit(fn, **jit_kwargs).lower(*args).compile())


def lowered_text(fn, *args) -> str:
  """The StableHLO text of `jax.jit(fn)` lowered for `args`."""
  return jax.jit(fn).lower(*args).as_text()


def custom_calls(compiled_text: str, target: str) -> int:
  """How many custom calls to `target` the HLO text holds."""
  return compiled_text.count(f'custom_call_target="{target}"')


def copies(fn, *args, **jit_kwargs) -> int:
  """Copy instructions in the entry computation (a copy fused into the
  producer of a value writes its result in place and costs nothing extra)."""
  text = hlo_text(fn, *args, **jit_kwargs)
  entry = text[text.index("\nENTRY") :]
  return len(re.findall(r"= \S+ copy\(", entry))


def assert_same_tree(test, actual, expected, leaves_equal) -> None:
  """Asserts equal tree structures and `leaves_equal` on each leaf pair."""
  test.assertEqual(
    jax.tree_util.tree_structure(actual), jax.tree_util.tree_structure(expected)
  )
  for got, want in zip(
    jax.tree_util.tree_leaves(actual),
    jax.tree_util.tree_leaves(expected),
    strict=True,
  ):
    test.assertTrue(leaves_equal(got, want), f"{got} != {want}")


def child_env() -> dict[str, str]:
  """The environment for a child Python that imports what this one does.
  Without pytest-xdist's worker variables: under ``pytest -n``, a pytest
  run in the child would take itself for one of this run's workers."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(_XDIST)}
  return dict(env, PYTHONPATH=os.pathsep.join(sys.path))


_XDIST = "PYTEST_XDIST_"


PYTEST_PLUGIN = "entangle_jax.testing.pytest_plugin"

# The development environment's pytest plugins that no child run's tests
# use, switched off there: hypothesis's alone takes a third of a child's
# start (about 0.9 of its 2.7 CPU seconds, measured on this suite's small
# racy project), and the suite starts some 50 such runs. Naming a plugin
# that is not installed is no error.
UNUSED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:jaxtyping")


def pytest_plugin_installed() -> bool:
  """Whether the package's pytest11 entry point is installed (pip and uv
  install it; Bazel's runfiles have no entry points)."""
  found = importlib.metadata.entry_points(group="pytest11")
  return any(e.value == PYTEST_PLUGIN for e in found)


def pytest_run(
  root: pathlib.Path | str, *args: str, quiet: bool = True, **env: str
) -> subprocess.CompletedProcess:
  """pytest on `root`: the plugin through its entry point where installed,
  else named with ``-p``; ``-q`` unless not `quiet` (``-p no:terminal``
  takes that option away)."""
  load = [] if pytest_plugin_installed() else ["-p", PYTEST_PLUGIN]
  # Forked from a Python that has imported jax and pytest where the
  # environment allows (`preloaded_child`): most of a child's start.
  return preloaded_child.run(
    [
      "-m",
      "pytest",
      *load,
      "-p",
      "no:cacheprovider",
      *UNUSED_PLUGINS,
      *(["-q"] if quiet else []),
      *args,
    ],
    timeout=300,
    env=dict(child_env(), **env),
    cwd=root,
  )


def run_python(source: str, *args: str, timeout: float, fresh: bool = False):
  """Runs ``python -c source *args``; returns the CompletedProcess. The
  child is forked from a Python that has imported jax and pytest
  (`preloaded_child`) unless `fresh`: a test of what importing does (the
  order of imports, what is loaded or registered) asks for a fresh
  interpreter."""
  return preloaded_child.run(
    ["-c", source, *args], timeout=timeout, env=child_env(), fresh=fresh
  )


def write_then_branch(slot, pred, late_write=False):
  """A write, then a cond: the "then_write" branch writes, the "else_read"
  branch reads. With `late_write`, one more write ("late_write") of the
  first write's token after the cond, unordered with the branches."""
  token = testing.write_slot(slot, 1.0)

  def then(t):
    with jax.named_scope("then_write"):
      return testing.write_slot(t, 2.0)

  def otherwise(t):
    with jax.named_scope("else_read"):
      return testing.read_slot(t).astype(jnp.int32)

  out = jax.lax.cond(pred, then, otherwise, token)
  if late_write:
    with jax.named_scope("late_write"):
      return out, testing.write_slot(token, 3.0)
  return out


def development_tool(name: str):
  """The module ``tools.<name>`` of the checkout; raises SkipTest (for the
  whole test module that asks at import) where there is none: CI also
  runs a copy of tests/ against the installed package, away from the
  checkout, where the development tools are not there to test."""
  try:
    return importlib.import_module(f"tools.{name}")
  except ModuleNotFoundError as missing:
    if missing.name != "tools":
      raise
    raise unittest.SkipTest(
      "no tools/ package: tests/ runs from a copy outside the checkout"
    ) from missing


def run_two_processes(
  worker: str, *args: str, timeout: float
) -> list[tuple[int, str]]:
  """Runs `worker` (a Python file) as process 0 and process 1 of a
  ``jax.distributed`` pair on a free localhost port, each given its number,
  the port and `args`: their exit statuses and outputs. Either left
  running past `timeout` seconds is killed."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
  env = child_env()
  env.pop("XLA_FLAGS", None)
  workers = [
    subprocess.Popen(
      [sys.executable, worker, str(i), port, *args],
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      env=env,
    )
    for i in range(2)
  ]
  outputs = []
  try:
    for process in workers:
      outputs.append(process.communicate(timeout=timeout)[0])
  finally:
    for process in workers:
      if process.poll() is None:
        process.kill()
        process.wait()
  return [(p.returncode, o) for p, o in zip(workers, outputs, strict=True)]


def run_mpirun(
  *args: str,
  timeout: float,
  env: dict[str, str] | None = None,
  ranks: int = 2,
) -> tuple[int, str]:
  """``mpirun -n RANKS`` of this interpreter with `args` (``--oversubscribe``;
  as root, ``--allow-run-as-root``): its exit status and output (stderr
  included). `env` (default `child_env`, without ``XLA_FLAGS`` and
  ``JAX_NUM_CPU_DEVICES``: the ranks compile with one CPU device each,
  without the flags of this run) is each rank's environment.

  Raises:
    AssertionError: it ran past `timeout` seconds; the whole process group
      (mpirun and its ranks) is killed first, and the message holds the
      output so far.
  """
  command = ["mpirun", "--oversubscribe", "-n", str(ranks)]
  if os.geteuid() == 0:  # Open MPI refuses root unless told.
    command.append("--allow-run-as-root")
  command += [sys.executable, *args]
  if env is None:
    env = child_env()
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_NUM_CPU_DEVICES", None)
  process = subprocess.Popen(
    command,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    env=env,
    start_new_session=True,
  )
  try:
    output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    output, _ = process.communicate()
    raise AssertionError(
      f"{' '.join(command)} ran past {timeout} s and was killed (a hang in "
      f"MPI?); its output:\n{output}"
    ) from None
  return process.returncode, output


REQUIRE_MPI = os.environ.get("ENTANGLE_JAX_REQUIRE_MPI") == "1"
"""CI's release lane sets it: a missing MPI then fails a test that needs
one, instead of skipping it."""


def needs_mpirun(test: unittest.TestCase) -> None:
  """Skips `test` where ``mpirun`` is not on PATH (Debian's openmpi-bin),
  or fails it there under ``ENTANGLE_JAX_REQUIRE_MPI=1``."""
  import shutil

  if shutil.which("mpirun") is None:
    reason = "no `mpirun` on PATH (Debian's openmpi-bin)"
    if REQUIRE_MPI:
      test.fail(f"ENTANGLE_JAX_REQUIRE_MPI=1, but {reason}")
    test.skipTest(reason)


def mpirun_pytest(
  folder: pathlib.Path, *options: str, swap: bool, timeout: float
) -> tuple[int, str]:
  """pytest on `folder`'s ``test_ranks.py`` with `options`, under
  ``mpirun -n 2`` (`run_mpirun`): the plugin loaded as `pytest_run` loads
  it, each rank's ``SWAP`` variable "1" when `swap`, else "0". Its exit
  status and output."""
  env = child_env()
  env.pop("XLA_FLAGS", None)
  env.pop("JAX_NUM_CPU_DEVICES", None)
  env["SWAP"] = "1" if swap else "0"
  load = [] if pytest_plugin_installed() else ["-p", PYTEST_PLUGIN]
  return run_mpirun(
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    *UNUSED_PLUGINS,
    *load,
    "--rootdir",
    str(folder),
    str(folder / "test_ranks.py"),
    *options,
    timeout=timeout,
    env=env,
  )


def world_numbered(modules, declarations=None) -> list[dict[int, range]]:
  """`races_across`'s ``communicators=`` for `modules` (one a rank) whose
  communicating calls all ran on communicators spanning every rank in the
  world's numbering: mpi4jax's default (``COMM_WORLD``'s clone), which
  every stored mpi4jax module here was made with, or the fake handles of
  generated modules. Each handle a module names maps to all the ranks."""
  from entangle_jax.testing._analysis import communicators
  from entangle_jax.testing._analysis.ranks import RankProgram

  texts = [
    pathlib.Path(m).read_text()
    if isinstance(m, os.PathLike)
    else m
    if isinstance(m, str)
    else m.as_text()
    for m in modules
  ]
  out = []
  for text in texts:
    calls = RankProgram(text, declarations).calls()
    out.append(dict.fromkeys(communicators.handles(calls), range(len(texts))))
  return out
