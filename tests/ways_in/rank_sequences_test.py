"""The cross-rank check over each rank's sequence of jitted calls (issue
77, defect 4): rank 1 calling ``g`` before ``f`` where rank 0 calls ``f``
then ``g`` (MPI aborts with ``MPI_ERR_TRUNCATE``, or each rank gets the
other's data) is a mismatch naming both modules; the same order on both
ranks is proved; without an execution record, several modules a rank
stay NOT PROVED.

Hermetic, in one process: each rank's modules are compiled here with the
rank as a Python value, and an FFI target declared as an allreduce is
registered with entangle's no-op handler, only to compile.
"""

import functools
import io
import json
import pathlib
import sys
import tempfile
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback

from entangle_jax._src import native
from entangle_jax._src.targets import sources, table
from entangle_jax._src.targets.declaration import Declarations, merged
from entangle_jax.testing._analysis import rank_sequences
from entangle_jax.testing._analysis.across_ranks import check_programs
from entangle_jax.testing._analysis.ranks import RankProgram
from entangle_jax.testing._ways_in import command, executions

ALLREDUCE = "rank_sequences_test_allreduce"
X = jax.ShapeDtypeStruct((4,), jnp.float32)
# The allreduces' communicator (handle 7) spans both ranks, in order.
WORLD = [{7: (0, 1)}, {7: (0, 1)}]


@functools.cache
def registered() -> None:
  handler = native.load().registrations()["entangle"]
  jax.ffi.register_ffi_target(ALLREDUCE, handler, platform="cpu")


def declarations() -> Declarations:
  mine = table.from_table(
    {
      "targets": {
        ALLREDUCE: {
          "communicates": {
            "kind": "collective",
            "communicator": "comm",
            "same_result": True,
          }
        }
      }
    },
    "rank_sequences_test",
  )
  return merged([mine, sources.BUILT_IN], distinct=False)


def allreduce(x):
  registered()
  call = jax.ffi.ffi_call(
    ALLREDUCE, jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True
  )
  return call(x, comm=np.int64(7))


def f(x):
  return allreduce(x)


def g(x):  # Twice f's size: f and g swapped are calls of different types.
  return allreduce(jnp.tile(x, 2))


def g_same_type(x):  # f's type and f's computation: only the module differs.
  return allreduce(x)


@functools.cache
def compiled(function) -> str:
  text = jax.jit(function).lower(X).compile().as_text()
  assert text is not None
  return text


def program(function) -> RankProgram:
  return RankProgram(compiled(function), declarations())


@functools.cache
def named(function) -> tuple[str, RankProgram]:
  return f"jit_{function.__name__}", program(function)


class ExecutionsTest(absltest.TestCase):
  """`check_executions`: each rank's executions as one sequence."""

  def test_g_before_f_is_a_mismatch_naming_both_modules(self):
    result = rank_sequences.check_executions(
      [[named(f), named(g)], [named(g), named(f)]], WORLD
    )
    self.assertEqual(result.verdict, "mismatch")
    assert result.mismatch is not None
    first, second = result.mismatch.calls
    assert first is not None and second is not None
    self.assertEqual((first.rank, second.rank), (0, 1))
    self.assertIn("in jit_f, execution 1", first.label)
    self.assertIn("in jit_g, execution 1", second.label)
    self.assertIn("shapes", result.mismatch.differs)

  def test_control_the_same_order_is_proved(self):
    result = rank_sequences.check_executions(
      [[named(f), named(g)], [named(f), named(g)]], WORLD
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)
    self.assertIn("jit_g, execution 2", result.matched[1].calls[0].label)

  def test_a_rank_that_runs_one_more_module_deadlocks(self):
    result = rank_sequences.check_executions(
      [[named(f), named(f)], [named(f)]], WORLD
    )
    self.assertEqual(result.verdict, "deadlock")

  def test_a_swap_of_one_type_is_told_by_the_module(self):
    # f and g_same_type make one allreduce of one type from their first
    # parameter: MPI matches them, and each rank gets the other's data.
    runs = [
      [named(f), named(g_same_type)],
      [named(g_same_type), named(f)],
    ]
    result = rank_sequences.check_executions(runs, WORLD)
    self.assertEqual(result.verdict, "mismatch")
    assert result.mismatch is not None
    self.assertIn("swapped", result.mismatch.differs)

  def test_control_without_module_names_the_swap_passes_as_proved(self):
    # The calls' origins alone (no module named) are equal: the same
    # concatenation, checked without naming the modules, is "proved".
    # This is why `check_executions` names each origin's module.
    class Plain:
      def __init__(self, runs):
        self.items = tuple(x for _, p in runs for x in p.items)
        self.unordered = ()

    runs = [
      [named(f), named(g_same_type)],
      [named(g_same_type), named(f)],
    ]
    plain = check_programs([Plain(r) for r in runs], WORLD)
    self.assertEqual(plain.verdict, "proved")


def write_dump(folder: pathlib.Path, modules: dict) -> None:
  """A dump folder holding each of `modules` (number -> function) under
  its number, as XLA names the files."""
  folder.mkdir(parents=True)
  for number, function in modules.items():
    name = f"module_{number:04d}.jit_{function.__name__}"
    (folder / f"{name}.cpu_after_optimizations.txt").write_text(
      compiled(function)
    )


def write_record(folder: pathlib.Path, ran: list[tuple[int, str]], done=True):
  """`record_executions`' record of `ran` in `folder` (``rankR``), as a
  process running mpi4py writes it: the allreduces' communicator (7)
  spans both ranks in the world's order."""
  (folder / rank_sequences.RECORD).write_text(
    json.dumps(
      {
        "format": rank_sequences.RECORD_FORMAT,
        "complete": done,
        "executions": [{"module": n, "name": name} for n, name in ran],
        "world_rank": int(folder.name.removeprefix("rank")),
        "communicators": [{"handle": 7, "world_ranks": [0, 1]}],
      }
    )
  )


class CommandTest(absltest.TestCase):
  """``--ranks`` follows each rank's execution record."""

  def setUp(self):
    super().setUp()
    root = pathlib.Path(tempfile.mkdtemp())
    self.folders = [root / "rank0", root / "rank1"]
    # Each rank compiled f and g, under its own numbers.
    write_dump(self.folders[0], {3: f, 5: g})
    write_dump(self.folders[1], {4: f, 8: g})
    # The allreduce declared as a project would declare it.
    self.project = root / "pyproject.toml"
    self.project.write_text(
      f"[tool.entangle-jax.targets.{ALLREDUCE}]\n"
      'communicates = { kind = "collective", communicator = "comm", '
      "same_result = true }\n"
    )

  def run_command(self, *args: str, stdout_only=False) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    status = command.main(
      [
        "--ranks",
        *map(str, self.folders),
        "--project",
        str(self.project),
        *args,
      ],
      out=out,
      err=err,
    )
    if stdout_only:
      return status, out.getvalue()
    return status, out.getvalue() + err.getvalue()

  def test_g_before_f_exits_1_naming_both_modules(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    write_record(self.folders[1], [(8, "jit_g"), (4, "jit_f")])
    status, out = self.run_command()
    self.assertEqual(status, 1, out)
    self.assertIn("Mismatch at call 1", out)
    self.assertIn(f"rank 0: call 1: collective {ALLREDUCE} (f32[4])", out)
    self.assertIn(f"rank 1: call 1: collective {ALLREDUCE} (f32[8])", out)
    self.assertIn("(in jit_f, execution 1)", out)
    self.assertIn("(in jit_g, execution 1)", out)
    status, out = self.run_command("--json", stdout_only=True)
    self.assertEqual(status, 1)
    (module,) = json.loads(out)["modules"]
    self.assertEqual(module["verdict"], "mismatch")

  def test_control_the_same_order_is_proved(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    write_record(self.folders[1], [(4, "jit_f"), (8, "jit_g")])
    status, out = self.run_command()
    self.assertEqual(status, 0, out)
    self.assertIn("Proved: the 2 ranks make 2 communicating calls", out)
    self.assertNotIn("NOT PROVED", out)

  def test_one_function_run_twice_is_matched_by_type_only(self):
    # f's two executions send what each was given: a rank that passed its
    # arguments the other way round (a skeptic's shape of issue 77, wrong
    # in every run) compiles the same module, so nothing tells them apart.
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g"), (3, "jit_f")])
    write_record(self.folders[1], [(4, "jit_f"), (8, "jit_g"), (4, "jit_f")])
    status, out = self.run_command()
    self.assertEqual(status, 2, out)
    self.assertIn("matched by type only", out)
    self.assertIn("calls 1 and 3", out)
    self.assertIn("in another execution", out)

  def test_control_without_a_record_several_modules_are_not_proved(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    status, out = self.run_command()
    self.assertEqual(status, 2, out)
    self.assertIn("NOT PROVED", out)
    self.assertIn("rank 1", out)
    self.assertIn("holds no execution record", out)

  def test_an_unfinished_record_proves_nothing(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    write_record(self.folders[1], [(4, "jit_f"), (8, "jit_g")], done=False)
    status, out = self.run_command()
    self.assertEqual(status, 2, out)
    self.assertIn("not complete", out)

  def test_a_record_of_a_module_the_dump_lacks_proves_nothing(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    write_record(self.folders[1], [(4, "jit_f"), (99, "jit_h")])
    status, out = self.run_command()
    self.assertEqual(status, 2, out)
    self.assertIn("module 99", out)

  def test_a_record_of_another_run_proves_nothing(self):
    write_record(self.folders[0], [(3, "jit_f"), (5, "jit_g")])
    write_record(self.folders[1], [(4, "jit_g"), (8, "jit_f")])
    status, out = self.run_command()
    self.assertEqual(status, 2, out)
    self.assertIn("another run", out)


def module_number(function, x) -> int | None:
  """The module id of `function`'s executable for `x` (JAX's cache)."""
  executable = function.lower(x).compile().runtime_executable()
  assert executable is not None
  proto = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
  return executions.module_id(proto)


class RecordTest(absltest.TestCase):
  """`record_executions`: every execution, in order, by module id."""

  def test_every_call_is_recorded_in_order(self):
    ff = jax.jit(lambda x: x + 1.0)
    gg = jax.jit(lambda x: x * 2.0)
    x = jnp.ones(3)
    ff(x)  # Before the block: its fast path is dropped as it begins.
    folder = tempfile.mkdtemp()
    with executions.record_executions(folder) as recorder:
      ff(x)
      gg(x)
      ff(x)
      ff(x)  # Taken by JAX's C++ fast path, were it on: Python unseen.
      ids = {name: module_number(fn, x) for name, fn in (("f", ff), ("g", gg))}
    record = rank_sequences.read_record(folder)
    ours = [e.number for e in record if e.number in ids.values()]
    self.assertEqual(ours, [ids["f"], ids["g"], ids["f"], ids["f"]])
    self.assertEqual(recorder.unknown, 0)

  def test_a_compiled_called_before_the_block_is_seen_inside(self):
    # A `Compiled` keeps the C++ fast path of its first call: inside the
    # block it is dropped at each call, so each is recorded.
    x = jnp.ones(5)

    def triple(x):
      return x * 3.0

    # A named function: JAX names a lambda's module differently across
    # versions (jit__lambda, jit__lambda_).
    hh = jax.jit(triple).lower(x).compile()
    hh(x)
    hh(x)
    folder = tempfile.mkdtemp()
    with executions.record_executions(folder):
      hh(x)
      hh(x)
    names = [e.name for e in rank_sequences.read_record(folder)]
    self.assertEqual(names.count("jit_triple"), 2, names)

  def test_control_with_the_fast_path_on_repeated_calls_are_unseen(self):
    # What the fast paths hide: the same hook with them left on sees one
    # execution of a function called three times.
    from jax._src.interpreters import pxla

    seen = []
    execute = pxla.ExecuteReplicated.__call__

    def called(self, *args):
      seen.append(self.name)
      return execute(self, *args)

    ff = jax.jit(lambda x: x - 1.0)
    x = jnp.ones(3)
    pxla.ExecuteReplicated.__call__ = called
    try:
      for _ in range(3):
        ff(x)
    finally:
      pxla.ExecuteReplicated.__call__ = execute
    self.assertLess(seen.count("<lambda>"), 3)

  def test_a_module_id_of_0_is_the_field_left_out(self):
    # proto3 leaves out a field that holds 0: the process's first module
    # (module_0000) has no id field. Field 5, varint: key 0x28.
    self.assertEqual(executions.module_id(bytes([0x28, 0x07])), 7)
    self.assertEqual(executions.module_id(bytes([0x0A, 0x01, 0x41])), 0)
    self.assertIsNone(executions.module_id(bytes([0x0A, 0x05, 0x41])))

  def test_an_unfinished_block_leaves_an_incomplete_record(self):
    folder = tempfile.mkdtemp()
    with (
      self.assertRaises(RuntimeError),
      executions.record_executions(folder),
    ):
      raise RuntimeError("the rank died")
    with self.assertRaisesRegex(rank_sequences.RankRecordMissing, "complete"):
      rank_sequences.read_record(folder)


class WhatRanTest(absltest.TestCase):
  """The record holds what ran, in an order every run keeps (skeptic pass
  77c: N4, N5, N8 and the threads of N6)."""

  def test_functions_freed_after_their_call_are_each_named(self):
    # An inline jax.jit(f)(x) frees its executable at once, and the next
    # one may get its id: the record named the earlier module again.
    def make(k):
      def step(x):
        return x + float(k)

      step.__name__ = f"step{k}"
      return step

    folder = tempfile.mkdtemp()
    with executions.record_executions(folder):
      for k in range(8):
        jax.jit(make(k))(jnp.ones(3)).block_until_ready()
    record = rank_sequences.read_record(folder)
    names = [e.name for e in record if e.name.startswith("jit_step")]
    self.assertEqual(names, [f"jit_step{k}" for k in range(8)])

  def test_a_call_that_raised_before_it_ran_is_not_recorded(self):
    def twice(x):
      return x * 2.0

    ff = jax.jit(twice)
    gone = jnp.ones(3)
    ff(gone).block_until_ready()  # Compiled before the block.
    gone.delete()
    folder = tempfile.mkdtemp()
    with executions.record_executions(folder):
      with self.assertRaises(RuntimeError):
        ff(gone)
      ff(jnp.ones(3)).block_until_ready()  # Control: recorded.
    record = rank_sequences.read_record(folder)
    self.assertEqual(
      [e.name for e in record if e.name == "jit_twice"], ["jit_twice"]
    )

  def test_a_call_made_by_a_host_callback_is_concurrent(self):
    def inner(x):
      return x + 1.0

    def outer(x):
      def host(v):
        return np.asarray(jax.jit(inner)(v))

      shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
      return io_callback(host, shape, x, ordered=True)

    folder = tempfile.mkdtemp()
    with executions.record_executions(folder):
      jax.jit(outer)(jnp.ones(3)).block_until_ready()
      jax.jit(inner)(jnp.ones(3)).block_until_ready()  # Control.
    record = rank_sequences.read_record(folder)
    found = [(e.name, e.concurrent) for e in record if e.name == "jit_inner"]
    self.assertEqual(found, [("jit_inner", True), ("jit_inner", False)])

  def executions_of(self, record) -> list[str]:
    compiled: dict[int, tuple[str, str, RankProgram | None]] = {
      1: ("jit_f", "f.txt", program(f)),
      2: ("jit_g", "g.txt", program(g)),
      3: ("jit_quiet", "quiet.txt", None),  # Communicates nothing.
    }
    runs = rank_sequences.executed("dump", 0, record, compiled)
    return [name for name, _, _ in runs]

  def test_a_communicating_execution_begun_inside_another_proves_nothing(self):
    Execution = rank_sequences.Execution
    record = [Execution(1, "jit_f"), Execution(2, "jit_g", concurrent=True)]
    with self.assertRaisesRegex(
      rank_sequences.RankRecordMissing, "execution 2 .jit_g. communicates and"
    ):
      self.executions_of(record)
    # Control: a concurrent one that communicates nothing.
    quiet = [Execution(1, "jit_f"), Execution(3, "jit_quiet", concurrent=True)]
    self.assertEqual(self.executions_of(quiet), ["jit_f"])

  def test_communicating_executions_of_two_threads_prove_nothing(self):
    Execution = rank_sequences.Execution
    record = [Execution(1, "jit_f", thread=0), Execution(2, "jit_g", thread=1)]
    with self.assertRaisesRegex(
      rank_sequences.RankRecordMissing, "two of its threads"
    ):
      self.executions_of(record)
    control = [Execution(1, "jit_f"), Execution(3, "jit_quiet", thread=1)]
    self.assertEqual(self.executions_of(control), ["jit_f"])


class FakeMpi:
  """What the recorder uses of mpi4py's ``MPI``, for a process that is
  world rank `rank` and holds communicators whose layouts are `layouts`
  (by handle)."""

  UNDEFINED = -32766

  class Exception(Exception):  # mpi4py names its error class so.
    pass

  def __init__(self, rank: int, layouts: dict[int, tuple[int, ...]]):
    fake = self

    class Group:
      def __init__(self, ranks):
        self.ranks = ranks

      def Get_size(self):
        return len(self.ranks)

      def Free(self):
        pass

      @staticmethod
      def Translate_ranks(group, ranks, world):
        return [group.ranks[r] for r in ranks]

    class Comm:
      def __init__(self, ranks):
        self.ranks = ranks

      def Get_group(self):
        return Group(self.ranks)

      def Get_rank(self):
        return rank

      @staticmethod
      def fromhandle(handle):
        if handle not in layouts:
          raise fake.Exception(f"no communicator {handle}")
        return Comm(layouts[handle])

    self.Group, self.Comm = Group, Comm
    self.COMM_WORLD = Comm(tuple(range(3)))
    self.COMM_NULL = object()

  def Is_initialized(self):
    return True

  def Is_finalized(self):
    return False


class LayoutRecordTest(absltest.TestCase):
  """Where the rank runs mpi4py's MPI, the record holds its world rank
  and the layout of each communicator its modules name (U3 of skeptic
  pass 77b: peers on a communicator that numbers the ranks otherwise)."""

  def record(self, mpi: FakeMpi | None) -> str:
    folder = tempfile.mkdtemp()
    modules = {"mpi4py.MPI": mpi} if mpi is not None else {}
    with (
      mock.patch.dict(sys.modules, modules),
      mock.patch.object(sources, "of_pyproject", lambda _: declarations()),
      executions.record_executions(folder),
    ):
      jax.jit(f)(jnp.ones(4)).block_until_ready()
    return folder

  def test_the_layout_of_each_communicator_is_recorded(self):
    folder = self.record(FakeMpi(rank=2, layouts={7: (2, 0, 1)}))
    self.assertEqual(rank_sequences.read_layouts(folder, 2), {7: (2, 0, 1)})
    with self.assertRaisesRegex(
      rank_sequences.RankRecordMissing, "written by world rank 2"
    ):
      rank_sequences.read_layouts(folder, 0)

  def test_a_handle_mpi_does_not_know_is_left_out(self):
    folder = self.record(FakeMpi(rank=0, layouts={8: (0, 1, 2)}))
    self.assertEqual(rank_sequences.read_layouts(folder, 0), {})

  def test_control_without_mpi_no_layout_is_recorded(self):
    folder = self.record(None)
    self.assertEqual(rank_sequences.read_layouts(folder, 1), {})
    data = json.loads(
      (pathlib.Path(folder) / rank_sequences.RECORD).read_text()
    )
    self.assertNotIn("world_rank", data)

  def test_the_check_follows_the_recorded_layouts(self):
    result = rank_sequences.check_executions(
      [[named(f)], [named(f)]], [{7: (1, 0)}, {7: (1, 0)}]
    )
    # Collectives alone: the numbering does not matter.
    self.assertEqual(result.verdict, "proved", result.text())


if __name__ == "__main__":
  absltest.main()
