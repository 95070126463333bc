"""`races_across`: the cross-rank check, hermetic, in one process (issue 70).

Each rank's program is compiled here with the rank as a Python value, as
the ranks of ``mpirun`` or ``jax.distributed`` would compile theirs, for
each shape of issue 70's table that one process can show, each with its
control (the passing twin). Communicating calls are XLA's own collectives
(``psum`` and ``all_gather`` under ``shard_map`` over two CPU devices) and
hand-written FFI targets declared as an allreduce, a send and a receive:
they are registered with entangle's no-op handler, only to compile (the
check reads the compiled module; nothing here runs them).
"""

import contextlib
import dataclasses
import functools
import io
import json
import os
import pathlib
import tempfile
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback
from jax.extend import core as jex_core
from jax.interpreters import mlir

from entangle_jax import entangle, in_program_order
from entangle_jax._src import native
from entangle_jax._src.targets import shipped, sources, table
from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.declaration import Declarations, merged
from entangle_jax.testing import CrossRankResult, races_across
from entangle_jax.testing._analysis import (
  across_ranks,
  call_attributes,
  rank_sequences,
  rank_values,
  ranks,
  same_module,
)
from entangle_jax.testing._analysis.call_attributes import raw_attribute
from entangle_jax.testing._hlo import dumped_module
from entangle_jax.testing._ways_in import command
from tests import test_util

ALLREDUCE = "ranks_test_allreduce"
SEND = "ranks_test_send"
RECV = "ranks_test_recv"
SCATTER = "ranks_test_scatter"
BCAST = "ranks_test_bcast"
DATA = pathlib.Path(__file__).resolve().parents[1] / "targets" / "data"
SHAPES = pathlib.Path(__file__).resolve().parent / "data" / "ranks_mpi4jax"
# What the check says of each stored shape (data/ranks_mpi4jax/README.md).
SHAPE_VERDICTS = {
  "same_order": "proved",
  "swapped": "mismatch",
  "sizes": "mismatch",
  "cond_local": "rank-dependent",
  "cond_reduced": "proved",
  "while_local": "rank-dependent",
  "while_reduced": "proved",
  "sendrecv_deadlock": "deadlock",
  "sendrecv_ok": "proved",
  "sendrecv_any_source": "proved",
  "sendrecv_any_source_unmet": "deadlock",
  "bcast_roots": "mismatch",
  "bcast_ok": "proved",
  "reductions_differ": "mismatch",
  "reductions_same": "proved",
}


@functools.cache
def registered() -> None:
  """Registers the test targets with entangle's no-op handler (once)."""
  handler = native.load().registrations()["entangle"]
  for target in (ALLREDUCE, SEND, RECV, SCATTER, BCAST):
    jax.ffi.register_ffi_target(target, handler, platform="cpu")


def declarations() -> Declarations:
  """The test targets declared as they would be in a pyproject.toml, then
  what is built in."""
  mine = table.from_table(
    {
      "targets": {
        ALLREDUCE: {
          "communicates": {
            "kind": "collective",
            "communicator": "comm",
            "same_result": True,
          }
        },
        SEND: {"communicates": {"kind": "send", "peer": "dest", "tag": "tag"}},
        RECV: {
          "communicates": {"kind": "recv", "peer": "source", "tag": "tag"}
        },
        # Declared as the shipped mpi4jax scatter is.
        SCATTER: {"communicates": shipped_communication("mpi_scatter_ffi")},
        BCAST: {"communicates": shipped_communication("mpi_bcast_ffi")},
      }
    },
    "across_ranks_test",
  )
  return merged([mine, sources.BUILT_IN], distinct=False)


def shipped_communication(target: str) -> Communication:
  """The shipped mpi4jax declaration of `target`'s communication."""
  (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
  (found,) = [t for t in binding.targets if t.pattern == target]
  assert found.communicates is not None
  return found.communicates


def scatter(rank, x, root=0, comm=7):
  """mpi4jax's scatter, as it lowers: the root passes ``(nranks, *block)``
  and gets its own block; every other rank passes a block-shaped
  placeholder and gets its block."""
  registered()
  block = x.shape[1:] if rank == root else x.shape
  call = jax.ffi.ffi_call(
    SCATTER, jax.ShapeDtypeStruct(block, x.dtype), has_side_effect=True
  )
  return call(x, root=np.int64(root), comm=np.int64(comm))


def bcast(rank, x, root=0, comm=7):
  """mpi4jax's bcast, as it lowers and returns: the call's result is
  empty on the root, which gets its own `x` back. Returns what the rank
  gets, and a second result (mpi4jax's token) to order later work after
  the call (XLA makes the root's empty result a constant)."""
  registered()
  shape = (0,) if rank == root else x.shape
  call = jax.ffi.ffi_call(
    BCAST,
    (
      jax.ShapeDtypeStruct(shape, x.dtype),
      jax.ShapeDtypeStruct((), jnp.int32),
    ),
    has_side_effect=True,
  )
  result, done = call(x, root=np.int64(root), comm=np.int64(comm))
  return (x if rank == root else result), done


def allreduce(x, comm=7):
  registered()
  call = jax.ffi.ffi_call(
    ALLREDUCE, jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True
  )
  return call(x, comm=np.int64(comm))


def send(x, dest, tag=0):
  registered()
  call = jax.ffi.ffi_call(
    SEND, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
  )
  return call(x, dest=np.int64(dest), tag=np.int64(tag))


def recv(after, shape, source, tag=0):
  registered()
  call = jax.ffi.ffi_call(
    RECV, jax.ShapeDtypeStruct(shape, jnp.float32), has_side_effect=True
  )
  return call(after, source=np.int64(source), tag=np.int64(tag))


# A send whose only result is a JAX token (issue 70: a hand-written MPI
# binding's send), the same target as `send`: a binding's own primitive
# whose custom call returns a !stablehlo.token.
token_send_p = jex_core.Primitive("across_ranks_test_token_send")
# What JAX types a token by: traced, not made (an eager token would start
# a JAX backend at import).
_TOKEN = jax.make_jaxpr(jax.lax.create_token)().out_avals[0]
token_send_p.def_abstract_eval(lambda x, **_: _TOKEN)
mlir.register_lowering(
  token_send_p, jax.ffi.ffi_lowering(SEND, has_side_effect=True)
)


def token_send(x, dest, tag=0):
  registered()
  return token_send_p.bind(x, dest=np.int64(dest), tag=np.int64(tag))


def check(program, ranks=2, *args) -> CrossRankResult:
  """Compiles `program(rank, ...)` once per rank, with the rank as a
  Python value, and checks the modules across ranks."""
  args = args or (jax.ShapeDtypeStruct((4,), jnp.float32),)
  modules = [
    jax.jit(functools.partial(program, rank)).lower(*args).compile()
    for rank in range(ranks)
  ]
  return across(modules, declarations())


def across(modules, declared: Declarations) -> CrossRankResult:
  """`races_across` of `modules` (one a rank), each communicator that
  they name spanning every rank in the world's numbering (the stored
  mpi4jax modules were made on mpi4jax's default communicator, the
  world's clone; the generated ones name fake handles)."""
  layouts = test_util.world_numbered(modules, declared)
  return races_across(modules, declarations=declared, communicators=layouts)


def check_shapes(program, shapes) -> CrossRankResult:
  """As `check`, each rank's module compiled for its own argument
  `shapes` (f32 arrays): the ranks may pass different shapes."""
  modules = [
    jax.jit(functools.partial(program, rank))
    .lower(jax.ShapeDtypeStruct(shape, jnp.float32))
    .compile()
    for rank, shape in enumerate(shapes)
  ]
  return across(modules, declarations())


def mesh() -> jax.sharding.Mesh:
  return jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def on_mesh(body):
  """`body` under shard_map over two CPU devices (XLA's collectives)."""
  return jax.shard_map(
    body,
    mesh=mesh(),
    in_specs=jax.sharding.PartitionSpec("x"),
    out_specs=jax.sharding.PartitionSpec(),
    check_vma=False,
  )


class TwoAllreducesTest(absltest.TestCase):
  """Rank 0 does extra work first, then two allreduces that nothing
  orders: the ranks may make them in different orders."""

  @staticmethod
  def program(rank, x, ordered):
    if rank == 0:
      x = jnp.sin(x) * 2.0  # extra work on rank 0
    a = allreduce(x)
    # Twice the size: two allreduces of one type whose operands rank 0
    # computes differently could be swapped (see SwapTest).
    y = jnp.tile(jnp.cos(x), 2)
    if ordered:
      y = entangle(y, a)
    b = allreduce(y)
    return a, b

  def test_unordered_allreduces_are_a_possible_deadlock(self):
    result = check(functools.partial(self.program, ordered=False))
    self.assertEqual(result.verdict, "deadlock")
    self.assertLen(result.unordered, 2)  # One pair on each rank.
    self.assertEqual({u.rank for u in result.unordered}, {0, 1})
    self.assertIn(ALLREDUCE, result.unordered[0].first)
    self.assertRegex(result.unordered[0].first, r" at \S+:\d+")
    self.assertRegex(result.unordered[0].second_location or "", r"\S+:\d+")
    self.assertIn("Possible deadlock", result.text())
    self.assertEqual(result.status, 1)

  def test_one_ranks_race_check_calls_the_pair_a_possible_deadlock(self):
    # The per-process check, on one rank's module: the two allreduces that
    # nothing orders are EJ009, not a plain race; the same rank's
    # allreduce against the example store's write is not (the control).
    from entangle_jax.testing import OrderAnalysis
    from entangle_jax.testing._findings.from_analysis import cause_of
    from entangle_jax.testing.example_store import write_slot

    def program(x):
      a, b = self.program(0, x, ordered=False)
      return a, b, write_slot(3, x[0])

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    compiled = jax.jit(program).lower(x).compile()
    found = OrderAnalysis(compiled, declarations=declarations()).races()
    causes = {
      tuple(sorted(op.target for op in (r.first, r.second))): cause_of(r)
      for r in found
    }
    both = causes[(ALLREDUCE, ALLREDUCE)]
    self.assertEqual(both.code, "EJ009")
    self.assertIn("possible deadlock", both.headline)
    self.assertIn("--ranks", " ".join(both.steps))
    mixed = [
      c.code for pair, c in causes.items() if pair != (ALLREDUCE, ALLREDUCE)
    ]
    self.assertTrue(mixed, causes)
    self.assertNotIn("EJ009", mixed)

  def test_control_ordered_with_entangle_is_proved(self):
    result = check(functools.partial(self.program, ordered=True))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)
    self.assertEqual(result.status, 0)
    self.assertStartsWith(result.text(), "Proved: the 2 ranks make 2 ")


class XlaCollectivesTest(absltest.TestCase):
  """XLA's own collectives need no declaration: psum and all_gather under
  shard_map, in one order on every rank, or swapped on rank 1."""

  @staticmethod
  def program(rank, x, swap):
    def body(x):
      first, second = (
        (lambda v: jax.lax.psum(v, "x"), lambda v: jax.lax.all_gather(v, "x"))
        if not (swap and rank == 1)
        else (
          lambda v: jax.lax.all_gather(v, "x"),
          lambda v: jax.lax.psum(v, "x"),
        )
      )
      a = first(x)
      b = second(entangle(jnp.cos(x), a))
      return jnp.sum(a) + jnp.sum(b)

    return on_mesh(body)(x)

  def test_one_order_is_proved(self):
    result = check(functools.partial(self.program, swap=False))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertEqual(
      [s.calls[0].label.split()[1] for s in result.matched],
      ["all-reduce", "all-gather"],
    )

  def test_swapped_on_rank_1_is_a_mismatch_at_call_1(self):
    result = check(functools.partial(self.program, swap=True))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    first, second = result.mismatch.calls
    assert first is not None and second is not None
    self.assertEqual((first.index, second.index), (1, 1))
    self.assertIn("all-reduce", first.label)
    self.assertIn("all-gather", second.label)
    self.assertRegex(first.label, r" at \S+:\d+")
    self.assertIn("Mismatch at call 1", result.text())


class PermutationOrderTest(absltest.TestCase):
  """Skeptic pass 77b, F3: a ppermute whose pairs rank 1 lists in another
  order (``[(1, 0), (0, 1)]``) is the same permutation, and ran right;
  the check compared the pairs' text and said mismatch."""

  @staticmethod
  def program(rank, x, pairs):
    mine = pairs[rank]
    return on_mesh(lambda v: jax.lax.ppermute(v, "x", mine))(x)

  def check_with(self, jaxlib: str, pairs) -> CrossRankResult:
    # Before jaxlib 0.12.1 only the collective is compared; from it, the
    # whole module (`SameModuleTest`), in which the pairs' text differs.
    with mock.patch.object(same_module, "installed_jaxlib", lambda: jaxlib):
      return check(functools.partial(self.program, pairs=pairs))

  def test_the_same_pairs_in_another_order_are_proved(self):
    pairs = ([(0, 1), (1, 0)], [(1, 0), (0, 1)])
    result = self.check_with("0.12.0.1", pairs)
    self.assertEqual(result.verdict, "proved", result.text())
    # From jaxlib 0.12.1 the ranks' modules differ (their text), and
    # XLA's collectives meet only within one module.
    result = self.check_with("0.12.1", pairs)
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("run different modules", result.mismatch.differs)

  def test_control_other_pairs_are_a_mismatch(self):
    pairs = ([(0, 1), (1, 0)], [(0, 1)])
    result = self.check_with("0.12.0.1", pairs)
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("source_target_pairs", result.mismatch.differs)


class NativeAttributesTest(absltest.TestCase):
  """Skeptic pass 77c, N7: a decision through a library call whose
  attributes differ between ranks (eigh's `lower`, LAPACK's `uplo`) was
  compared without them, and proved; rank 0 read the lower triangle of
  the shared matrix, rank 1 the upper, and their branches' allreduces met
  each other."""

  @staticmethod
  def program(rank, x, lower):
    m = allreduce(x.reshape(2, 2))
    w = jax.lax.linalg.eigh(m, lower=lower(rank), symmetrize_input=False)[1]
    return jax.lax.cond(w[0] > 0, allreduce, lambda v: v * 10.0, x)

  def test_a_decision_through_another_triangle_is_rank_dependent(self):
    result = check(functools.partial(self.program, lower=lambda r: r == 0))
    self.assertEqual(result.verdict, "rank-dependent", result.text())

  def test_control_the_same_triangle_is_proved(self):
    result = check(functools.partial(self.program, lower=lambda r: True))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_a_handles_address_is_left_out_and_the_rest_kept(self):
    kept = rank_values._without_handles(
      "backend_config={comm = 94269314012272 : i64, uplo = 76 : ui8}"
    )
    self.assertEqual(kept, "backend_config={uplo = 76 : ui8}")
    self.assertIsNone(rank_values._without_handles('backend_config="\x01"'))


class SameModuleTest(absltest.TestCase):
  """From jaxlib 0.12.1, XLA's collectives meet only between processes
  that run the same module (`same_module`; measured under gloo in
  across_ranks_distributed_test): a psum of one shape, in one order, of a
  value each rank shifts by its own constant hangs there, and ran right
  before."""

  @staticmethod
  def program(rank, x, shift):
    def body(x):
      return jnp.sum(jax.lax.psum(x + shift(rank), "x"))

    return on_mesh(body)(x)

  def check_with(self, jaxlib: str, shift) -> CrossRankResult:
    with mock.patch.object(same_module, "installed_jaxlib", lambda: jaxlib):
      return check(functools.partial(self.program, shift=shift))

  def test_modules_that_differ_are_a_mismatch_from_jaxlib_0_12_1(self):
    result = self.check_with("0.12.1", lambda rank: 1.0 + rank)
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    differs = result.mismatch.differs
    self.assertIn("the ranks run different modules, first at line", differs)
    # Each rank's line: its own constant.
    self.assertRegex(differs, r"rank 0: `[^`]*constant\(1\)")
    self.assertRegex(differs, r"rank 1: `[^`]*constant\(2\)")
    self.assertIn("all-reduce", str(result.mismatch.calls[0]))

  def test_control_before_0_12_1_the_same_calls_are_proved(self):
    result = self.check_with("0.12.0.1", lambda rank: 1.0 + rank)
    self.assertEqual(result.verdict, "proved", result.text())

  def test_control_one_module_on_every_rank_is_proved(self):
    result = self.check_with("0.12.1", lambda rank: 1.0)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)

  def test_versions_are_read_by_their_release_numbers(self):
    need = same_module.collectives_need_same_module
    self.assertEqual(
      [need(v) for v in ("0.12.0.1", "0.12.1", "0.12.1rc0", "0.13.0")],
      [False, True, True, True],
    )
    self.assertFalse(need("0.9.10"))


class SizesTest(absltest.TestCase):
  @staticmethod
  def program(rank, x, sizes):
    return allreduce(jnp.tile(x, sizes[rank]))

  def test_different_sizes_are_a_mismatch(self):
    result = check(functools.partial(self.program, sizes=(1, 2)))
    self.assertEqual(result.verdict, "mismatch")
    assert result.mismatch is not None
    self.assertIn("f32[4]", result.mismatch.differs)
    self.assertIn("f32[8]", result.mismatch.differs)

  def test_control_same_sizes_is_proved(self):
    result = check(functools.partial(self.program, sizes=(2, 2)))
    self.assertEqual(result.verdict, "proved", result.text())


class CommunicatorTest(absltest.TestCase):
  """Communicators are compared up to a consistent renaming: each
  process's handle has its own address."""

  @staticmethod
  def program(rank, x, comms):
    a = allreduce(x, comm=comms[rank][0])
    return allreduce(entangle(x, a), comm=comms[rank][1])

  def test_renamed_consistently_is_proved(self):
    # One communicator a rank: rank 1's 70 is rank 0's 7.
    comms = ((7, 7), (70, 70))
    result = check(functools.partial(self.program, comms=comms))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_two_communicators_a_rank_are_not_proved(self):
    # Issue 77: rank 1's 70 may be rank 0's 7, or rank 0's 8: a handle's
    # value differs in each process, so rank 1 making its calls on the two
    # communicators in the other order renames as consistently as the
    # right order does (each rank then waits in a communicator the other
    # is not in). And one of them may span a subset of the ranks
    # (MPI.COMM_WORLD.Split). Nothing is proved, exit 2.
    comms = ((7, 8), (70, 80))
    result = check(functools.partial(self.program, comms=comms))
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertEqual(result.status, 2)
    self.assertLen(result.communicators, 2)  # A sentence a rank.
    self.assertIn("2 communicators", result.text())
    self.assertIn("Split", result.text())

  def test_a_communicator_the_module_does_not_show_is_not_proved(self):
    # The declaration names attribute `comm`; a call without it (a binding
    # that passes its handle at run time) cannot be compared. Control: the
    # same modules with the attribute are proved.
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    text = str(jax.jit(allreduce).lower(x).compile().as_text())
    self.assertIn("comm = 7 : i64", text)
    result = across([text, text], declarations())
    self.assertEqual(result.verdict, "proved", result.text())
    hidden = text.replace("comm = 7 : i64", "other = 7 : i64")
    result = across([hidden, hidden], declarations())
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("not a constant in the module", result.text())

  def test_a_decision_reduced_over_another_communicator_is_not_proved(self):
    # The decision is reduced over communicator 9, which may be a subset
    # of the ranks: the allreduce under it (communicator 7) may be made
    # by some ranks only. Control: reduced over 7 itself, it is proved.
    def program(rank, x, over):
      del rank
      decision = allreduce(jnp.sum(x), comm=over)
      return jax.lax.cond(decision > 0, allreduce, lambda v: v, x)

    result = check(functools.partial(program, over=9))
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    result = check(functools.partial(program, over=7))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_one_communicator_for_two_of_another_rank_is_a_mismatch(self):
    comms = ((7, 8), (70, 70))
    result = check(functools.partial(self.program, comms=comms))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("the communicator", result.mismatch.differs)
    self.assertEqual([c.index for c in result.mismatch.calls if c], [2, 2])

  def test_a_lowered_module_is_compiled(self):
    def program(rank, x):
      del rank
      return allreduce(x)

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    lowered = [jax.jit(functools.partial(program, r)).lower(x) for r in (0, 1)]
    layouts = [{7: range(2)}] * 2
    result = races_across(
      lowered, declarations=declarations(), communicators=layouts
    )
    self.assertEqual(result.verdict, "proved", result.text())


class CommunicatorLayoutTest(absltest.TestCase):
  """A send's or receive's peer is a rank of its communicator, so where
  peers matter the communicator's layout (the world rank of each of its
  ranks) must be known to be the world's (skeptic pass 77b, U3)."""

  def mpi4jax_ranks(self) -> list[str]:
    # allreduce, bcast, sendrecv with the other rank, barrier, allreduce,
    # on mpi4jax's default communicator (tests/targets/data/README.md).
    return [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]

  def check(self, layouts) -> CrossRankResult:
    ranks = self.mpi4jax_ranks()
    handles = [
      dict.fromkeys(test_util.world_numbered([t], every_declaration())[0])
      for t in ranks
    ]
    given = None
    if layouts is not None:
      given = [
        dict.fromkeys(h, layout)
        for h, layout in zip(handles, layouts, strict=True)
      ]
    return races_across(
      ranks, declarations=every_declaration(), communicators=given
    )

  def test_control_the_worlds_numbering_is_proved(self):
    result = self.check([(0, 1), (0, 1)])
    self.assertEqual(result.verdict, "proved", result.text())

  def test_peers_on_a_communicator_of_unknown_layout_are_not_proved(self):
    # Each module holds its communicator's handle, not its ranks: the
    # world's clone and COMM_WORLD.Split(0, size - 1 - rank) (where "to
    # rank 1" is rank 0's message to itself) compile alike.
    result = self.check(None)
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertEqual(result.status, 2)
    self.assertLen(result.communicators, 2)
    self.assertIn("its layout is not recorded", result.text())
    self.assertIn("record_executions", result.text())

  def test_a_communicator_numbering_the_ranks_the_other_way_is_not_proved(
    self,
  ):
    # Its sendrecv with "the other rank" (1 - rank) is, translated to
    # world ranks, each rank's message to itself; and its bcast's root is
    # a rank of it.
    result = self.check([(1, 0), (1, 0)])
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("world rank [1, 0][k]", result.text())
    self.assertIn("names a root", result.text())

  def test_ranks_on_communicators_of_different_layouts_are_not_proved(self):
    # Two communicators, whichever numbering each has: their calls never
    # meet (here rank 1's sendrecv with itself goes through, and rank 0's
    # waits: a deadlock, found first).
    result = self.check([(0, 1), (1, 0)])
    self.assertNotEqual(result.verdict, "proved", result.text())
    self.assertIn("different layouts", " ".join(result.communicators))

  def test_a_communicator_of_some_ranks_is_not_proved(self):
    result = self.check([(0,), (1,)])
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("rank 0: the communicator", result.text())
    self.assertIn("spans world ranks [0] of the 2 given", result.text())

  def test_collectives_need_the_layout_too(self):
    # Skeptic pass 77c, N6: rank 0 on COMM_SELF, rank 1 on COMM_WORLD
    # make the same allreduce, and rank 1 waits for ever. Ranks that
    # share a communicator make the same calls on it, but a module does
    # not say that they share it.
    def program(rank, x):
      del rank
      return allreduce(entangle(x, allreduce(x)))

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    modules = [
      jax.jit(functools.partial(program, r)).lower(x).compile() for r in (0, 1)
    ]
    result = races_across(modules, declarations=declarations())
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("COMM_SELF", result.text())
    result = races_across(
      modules,
      declarations=declarations(),
      communicators=[{7: (0,)}, {7: (0, 1)}],
    )
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("rank 0: the communicator", result.text())
    self.assertIn("spans world ranks [0] of the 2", result.text())
    self.assertLen(result.communicators, 1)  # Rank 1's spans both.
    # Controls: every rank's spanning both ranks, in any order, is proved
    # (collectives alone do not name ranks).
    for layout in ((0, 1), (1, 0)):
      result = races_across(
        modules,
        declarations=declarations(),
        communicators=[{7: layout}, {7: layout}],
      )
      self.assertEqual(result.verdict, "proved", result.text())

  def test_collectives_beside_xla_collectives_need_every_rank(self):
    # A result reduced over a communicator of some ranks is not the same
    # on every rank, and XLA's collectives are on every rank. Over every
    # rank, in any order, it is the same on each (issue 77: the other
    # order was not proved).
    def program(rank, x):
      del rank
      return on_mesh(lambda v: jax.lax.psum(allreduce(v), "x"))(x)

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    modules = [
      jax.jit(functools.partial(program, r)).lower(x).compile() for r in (0, 1)
    ]
    result = races_across(
      modules,
      declarations=declarations(),
      communicators=[{7: (0,)}, {7: (1,)}],
    )
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("spans world ranks [0] of the 2", result.text())
    for layout in ((0, 1), (1, 0)):
      result = races_across(
        modules,
        declarations=declarations(),
        communicators=[{7: layout}, {7: layout}],
      )
      self.assertEqual(result.verdict, "proved", result.text())

  def test_bad_layouts_are_named(self):
    ranks = self.mpi4jax_ranks()
    cases = [
      ({7: (0, 1)}, TypeError, "one mapping per rank, not dict"),
      ([{7: (0, 1)}], ValueError, "1 entries for 2 ranks"),
      ([{7: (0, 1)}, [(7, (0, 1))]], TypeError, r"communicators\[1\] must"),
      ([{"7": (0, 1)}, {}], TypeError, "the handle '7' is not an int"),
      ([{7: "01"}, {}], TypeError, "sequence of world ranks, not str"),
      ([{7: (0, 0)}, {}], ValueError, r"\[0, 0\] is not a layout"),
      ([{7: (0, 1.0)}, {}], TypeError, "other than int ranks"),
    ]
    for given, error, message in cases:
      with self.subTest(message), self.assertRaisesRegex(error, message):
        races_across(ranks, communicators=given)  # ty: ignore[invalid-argument-type]


class CondTest(absltest.TestCase):
  """A collective under ``lax.cond``: on rank-local data, or on data the
  ranks reduced first."""

  @staticmethod
  def program(rank, x, reduced):
    del rank
    decision = jnp.sum(x)
    if reduced:
      decision = allreduce(decision)
    return jax.lax.cond(decision > 0, allreduce, lambda v: v, x)

  def test_rank_local_decision_is_rank_dependent(self):
    result = check(functools.partial(self.program, reduced=False))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    (found,) = result.rank_dependent
    self.assertEqual(found.construct, "conditional")
    self.assertEqual(found.ranks, (0, 1))
    self.assertIn("entry parameter 0", found.depends_on)
    self.assertIn(str(found.location), found.label)
    self.assertIn(ALLREDUCE, found.calls[0])
    self.assertIn("reduce the decision across ranks first", result.text())

  def test_control_decision_reduced_first_is_proved(self):
    result = check(functools.partial(self.program, reduced=True))
    self.assertEqual(result.verdict, "proved", result.text())


class ElidedConstantTest(absltest.TestCase):
  """A decision on an allreduced value weighed by a table of constants:
  XLA's text writes a large constant as ``{...}``, so equal text on two
  ranks says nothing of their values (a skeptic's shape of issue 77: a
  per-rank table of 17 elements was "proved", and hung)."""

  @staticmethod
  def program(rank, x, size, per_rank):
    table = np.arange(size, dtype=np.float32) + (1 + rank if per_rank else 1)

    def weighed(y):
      return (jnp.resize(y, (size,)) * table).sum()

    total = allreduce(x)
    return jax.lax.cond(
      weighed(total) > 100.0,
      lambda t: allreduce(t),
      lambda t: t,
      total,
    )

  def test_a_table_written_as_elided_is_not_proved(self):
    result = check(functools.partial(self.program, size=17, per_rank=True))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    self.assertIn("--xla_dump_large_constants", result.text())

  def test_control_a_table_written_out_is_compared(self):
    # 8 elements are written out: equal on both ranks, proved; one per
    # rank, rank-dependent with each rank's table.
    same = check(functools.partial(self.program, size=8, per_rank=False))
    self.assertEqual(same.verdict, "proved", same.text())
    differs = check(functools.partial(self.program, size=8, per_rank=True))
    self.assertEqual(differs.verdict, "rank-dependent", differs.text())
    self.assertNotIn("--xla_dump_large_constants", differs.text())


class ConstantDecisionTest(absltest.TestCase):
  """A ``cond`` whose predicate XLA folds to a constant: XLA moves the
  taken branch's collective out and leaves ``conditional(constant)``
  whose other branch still holds one (a skeptic's shape of issue 77, a
  right program reported as a possible deadlock)."""

  @staticmethod
  def program(rank, x, predicate):
    return jax.lax.cond(
      predicate(rank),
      lambda v: allreduce(v),
      lambda v: allreduce(jnp.tile(v, 2))[:4],
      x,
    )

  def test_the_same_constant_on_every_rank_is_proved(self):
    result = check(
      functools.partial(self.program, predicate=lambda r: jnp.int32(0) == 0)
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)

  def test_control_a_constant_per_rank_is_a_mismatch(self):
    # Rank 0 takes the f32[4] branch, rank 1 the f32[8] one.
    result = check(
      functools.partial(self.program, predicate=lambda r: jnp.int32(r) == 0)
    )
    self.assertEqual(result.verdict, "mismatch", result.text())


class WhileTest(absltest.TestCase):
  """A ``while`` on a residual with an allreduce inside: the residual
  computed on each rank, or reduced across ranks first."""

  @staticmethod
  def program(rank, x, reduced):
    del rank

    def body(carry):
      x, _ = carry
      total = allreduce(x)
      x = entangle(x * 0.5, total)
      residual = jnp.abs(x).sum()
      if reduced:
        residual = allreduce(residual)
      return x, residual

    return jax.lax.while_loop(
      lambda carry: carry[1] > 1e-3, body, (x, jnp.float32(jnp.inf))
    )

  def test_local_residual_is_rank_dependent(self):
    result = check(functools.partial(self.program, reduced=False))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    (found,) = result.rank_dependent
    self.assertEqual(found.construct, "loop")
    self.assertIn(ALLREDUCE, found.calls[0])

  def test_control_reduced_residual_is_proved(self):
    result = check(functools.partial(self.program, reduced=True))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)  # The loop's two, once.


class MessageTest(absltest.TestCase):
  """A send meets a receive by peer and tag; MPI then takes the message
  as sent, by element type and count: a longer message aborts
  (MPI_ERR_TRUNCATE under mpirun, a skeptic's shape of issue 77, once
  "proved"), another type is read as that type."""

  @staticmethod
  def program(rank, x, sent):
    if rank == 0:
      return send(sent(x), dest=1)
    return recv(x, (4,), source=0)

  def test_a_longer_message_is_a_mismatch(self):
    result = check(
      functools.partial(self.program, sent=lambda x: jnp.tile(x, 2))
    )
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("rank 0 sends f32[8]", result.mismatch.differs)
    self.assertIn("rank 1 receives it into f32[4]", result.mismatch.differs)

  def test_another_type_is_a_mismatch(self):
    result = check(
      functools.partial(self.program, sent=lambda x: x.astype(jnp.int32))
    )
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("s32[4]", result.mismatch.differs)

  def test_control_the_same_count_in_another_shape_is_proved(self):
    # MPI matches counts, not shapes: f32[2,2] meets f32[4].
    result = check(
      functools.partial(self.program, sent=lambda x: x.reshape(2, 2))
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)


class ProcNullTest(absltest.TestCase):
  """A receive from MPI_PROC_NULL completes at once and receives nothing
  (skeptic pass 77b: read as a receive from any source, it met rank 0's
  send, and a program whose rank 1 got uninitialized memory, and whose
  send no receive took, was proved). The declared binding names no
  communicator, so Open MPI's numbers hold: PROC_NULL -2, ANY_SOURCE
  -1."""

  @staticmethod
  def program(rank, x, source):
    if rank == 0:
      return send(x, dest=1)
    return recv(x, (4,), source=source)

  def test_a_receive_from_proc_null_meets_no_send(self):
    result = check(functools.partial(self.program, source=-2))
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    rank0, rank1 = result.deadlock.blocked
    assert rank0 is not None
    self.assertIn("send", rank0.label)
    self.assertIsNone(rank1)  # It made no call that communicates.

  def test_control_from_rank_0_or_any_source_is_proved(self):
    for source in (0, -1):
      with self.subTest(source=source):
        result = check(functools.partial(self.program, source=source))
        self.assertEqual(result.verdict, "proved", result.text())

  def test_the_library_is_told_by_the_communicators_handle(self):
    # Open MPI: an address; MPICH: a 32-bit value (MPI_COMM_WORLD is
    # 0x44000000 there); none: Open MPI's numbers.
    self.assertEqual(call_attributes.null_peer(0x7F12_3456_7890), -2)
    self.assertEqual(call_attributes.null_peer(0x44000000), -1)
    self.assertEqual(call_attributes.null_peer(None), -2)


class SendRecvTest(absltest.TestCase):
  """jax#3976's shape: both ranks send first (blocking), then receive."""

  @staticmethod
  def program(rank, x, rank1_receives_first):
    other = 1 - rank
    if rank == 1 and rank1_receives_first:
      got = recv(x, (4,), source=other)
      send(entangle(x, got), dest=other)
      return got
    token = send(x, dest=other)
    return recv(token, (4,), source=other)

  def test_both_send_first_deadlocks(self):
    result = check(functools.partial(self.program, rank1_receives_first=False))
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    blocked = result.deadlock.blocked
    self.assertTrue(all(b is not None and "send" in b.label for b in blocked))
    self.assertIn("Deadlock: no rank can go on.", result.text())

  def test_control_rank_1_receives_first_is_proved(self):
    result = check(functools.partial(self.program, rank1_receives_first=True))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)

  def test_a_token_only_send_ordered_by_its_token_is_proved(self):
    # Each rank sends, then receives; rank 1 receives first. The receive
    # after a send is ordered after the send's token only, by entangle or
    # by in_program_order: the check reads the token operand of the
    # entangle as an order, and proves the program.
    def program(order, rank, x):
      other = 1 - rank
      if rank == 1:
        got = recv(x, (4,), source=other)
        return got, token_send(entangle(x, got), dest=other)
      token = token_send(x, dest=other)
      return recv(order(x, token), (4,), source=other), token

    result = check(functools.partial(program, entangle))
    self.assertEqual(result.verdict, "proved", result.text())

    def transformed(rank, x):
      return in_program_order(
        functools.partial(program, lambda x, token: x, rank)
      )(x)

    result = check(transformed)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)
    # Control: nothing orders rank 0's receive after its send.
    result = check(functools.partial(program, lambda x, token: x))
    self.assertEqual(result.verdict, "deadlock", result.text())

  def test_a_tag_that_never_matches_deadlocks(self):
    def program(rank, x):
      other = 1 - rank
      if rank == 0:
        return send(x, dest=other, tag=1)
      return recv(x, (4,), source=other, tag=2)

    self.assertEqual(check(program).verdict, "deadlock")


class Mpi4jaxModulesTest(absltest.TestCase):
  """The stored modules of a real mpi4jax program under ``mpirun -n 2``
  (tests/targets/data/README.md), with the shipped declarations."""

  def mpi4jax(self) -> Declarations:
    (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
    return binding.declarations()

  def test_the_two_ranks_are_proved(self):
    ranks = [DATA / f"mpi4jax_rank{r}_of_2.txt" for r in (0, 1)]
    result = across(ranks, self.mpi4jax())
    self.assertEqual(result.verdict, "proved", result.text())
    kinds = [s.calls[0].label.split()[:2] for s in result.matched]
    self.assertEqual(
      kinds,
      [
        ["collective", "mpi_allreduce_ffi"],
        ["collective", "mpi_bcast_ffi"],
        ["sendrecv", "mpi_sendrecv_ffi"],
        ["collective", "mpi_barrier_ffi"],
        ["collective", "mpi_allreduce_ffi"],
      ],
    )

  def test_a_rank_that_broadcasts_from_another_root_is_a_mismatch(self):
    rank1 = (DATA / "mpi4jax_rank1_of_2.txt").read_text()
    rank1 = rank1.replace("root = 0 : i64", "root = 1 : i64")
    result = across(
      [(DATA / "mpi4jax_rank0_of_2.txt").read_text(), rank1], self.mpi4jax()
    )
    self.assertEqual(result.verdict, "mismatch")
    assert result.mismatch is not None
    self.assertIn("root", result.mismatch.differs)

  def test_a_third_rank_with_the_wrong_peers_deadlocks(self):
    # The one-process module's sendrecv talks to rank 0, not around a
    # ring of three: ranks 0 and 1 exchange, then wait at the barrier.
    ranks = [DATA / f"mpi4jax_rank{r}_of_2.txt" for r in (0, 1)]
    result = across([*ranks, DATA / "mpi4jax_rank0_of_1.txt"], self.mpi4jax())
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    zero, one, two = result.deadlock.blocked
    assert zero is not None and one is not None and two is not None
    self.assertIn("mpi_barrier_ffi", zero.label)
    self.assertIn("mpi_barrier_ffi", one.label)
    self.assertIn("sendrecv mpi_sendrecv_ffi to rank 0", two.label)


class ExtraCollectiveTest(absltest.TestCase):
  """Rank 0 makes one more allreduce than rank 1: rank 0 waits for ever."""

  @staticmethod
  def program(rank, x, extra):
    x = allreduce(x)
    if rank == 0 and extra:
      x = allreduce(x * 2.0)
    return x

  def test_one_more_collective_on_rank_0_deadlocks(self):
    result = check(functools.partial(self.program, extra=True))
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    waiting, done = result.deadlock.blocked
    assert waiting is not None
    self.assertEqual(waiting.index, 2)
    self.assertIsNone(done)
    self.assertIn("rank 1: has made all its calls", result.text())

  def test_control_the_same_collectives_is_proved(self):
    result = check(functools.partial(self.program, extra=False))
    self.assertEqual(result.verdict, "proved", result.text())


class Mpi4jaxShapesTest(absltest.TestCase):
  """Issue 70's shapes as real mpi4jax programs, compiled by each rank of
  ``mpirun -n 2`` (data/ranks_mpi4jax/README.md)."""

  def test_each_shape_gets_its_verdict(self):
    (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
    mpi4jax = merged([binding.declarations(), sources.BUILT_IN], distinct=False)
    found = {}
    for shape in SHAPE_VERDICTS:
      files = [
        next((SHAPES / shape / f"rank{r}").glob("*.txt")) for r in (0, 1)
      ]
      found[shape] = across(files, mpi4jax).verdict
    self.assertEqual(found, SHAPE_VERDICTS)

  def test_the_command_reads_the_dump_folders(self):
    for shape in ("while_local", "while_reduced"):
      folders = [str(SHAPES / shape / f"rank{r}") for r in (0, 1)]
      out, err = io.StringIO(), io.StringIO()
      with shipped_mpi4jax():
        status = command.main(["--ranks", *folders], out=out, err=err)
      expected = 0 if shape == "while_reduced" else 1
      self.assertEqual(status, expected, out.getvalue())
    self.assertIn("Rank-dependent", command_text("while_local"))

  def test_one_folder_or_one_folder_twice_is_a_usage_error(self):
    rank0 = str(SHAPES / "while_reduced" / "rank0")
    for folders, said in (
      ([rank0], "two or more"),
      ([rank0, rank0 + "/"], "for two ranks"),
    ):
      err = io.StringIO()
      with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
        command.main(["--ranks", *folders], out=io.StringIO(), err=err)
      self.assertEqual(e.exception.code, 2)
      self.assertIn(said, err.getvalue())


def command_text(shape: str) -> str:
  folders = [str(SHAPES / shape / f"rank{r}") for r in (0, 1)]
  out = io.StringIO()
  with shipped_mpi4jax():
    command.main(["--ranks", *folders], out=out, err=io.StringIO())
  return out.getvalue()


class DeclarationsTest(absltest.TestCase):
  def test_a_table_declares_communication(self):
    (target,) = table.from_table(
      {"targets": {"t": {"communicates": {"kind": "recv", "peer": 1}}}}, "p"
    ).targets
    self.assertEqual(target.communicates, Communication("recv", peer=1))
    self.assertIn("communicates: recv, peer operand 1", str(target))

  def test_bad_communication_is_named(self):
    for keys, said in [
      ({"kind": "send"}, "a send needs its peer's place"),
      ({"kind": "bcast"}, "kind must be one of"),
      ({"kind": "collective", "peer": "dest"}, "a collective has no peer"),
      ({"kind": "collective", "size": 2}, r"unknown keys \['size'\]"),
    ]:
      with self.assertRaisesRegex(ValueError, said):
        table.from_table({"targets": {"t": {"communicates": keys}}}, "p")

  def test_every_mpi4jax_target_with_a_peer_names_it(self):
    (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
    declared = {
      t.pattern: t.communicates for t in binding.targets if t.communicates
    }
    self.assertLen(declared, 12)
    self.assertEqual(declared["mpi_send_ffi"].peer, "dest")
    self.assertEqual(declared["mpi_recv_ffi"].peer, "source")
    self.assertTrue(declared["mpi_allreduce_ffi"].same_result)

  def test_modules_must_be_a_list(self):
    with self.assertRaisesRegex(TypeError, "one module per rank"):
      races_across("HloModule m")
    with self.assertRaisesRegex(ValueError, "one module per rank"):
      races_across([])


class CommandTest(absltest.TestCase):
  """``python -m entangle_jax.testing --ranks DIR0 DIR1``."""

  def run_command(self, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = command.main(list(args), out=out, err=err)
    return status, out.getvalue(), err.getvalue()

  def dumps(self, texts: list[str]) -> list[str]:
    return write_dumps(texts)

  def test_mpi4jax_ranks_are_proved(self):
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *self.dumps(texts))
    self.assertEqual(status, 0, out)
    self.assertIn("Proved: the 2 ranks make 5 communicating calls", out)

  def test_a_mismatch_exits_1_and_json_says_why(self):
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    texts[1] = texts[1].replace("root = 0 : i64", "root = 1 : i64")
    folders = self.dumps(texts)
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *folders)
      self.assertEqual(status, 1)
      self.assertIn("Mismatch at call 2", out)
      status, out, _ = self.run_command("--ranks", *folders, "--json")
    self.assertEqual(status, 1)
    (module,) = json.loads(out)["modules"]
    self.assertEqual(module["verdict"], "mismatch")

  def test_ranks_that_compiled_different_modules_exit_1(self):
    text = (DATA / "mpi4jax_rank0_of_2.txt").read_text()
    # No record: the modules are paired in compile order.
    folders = write_dumps([text, text], record=False)
    (
      pathlib.Path(folders[1])
      / "module_0002.jit_other.cpu_after_optimizations.txt"
    ).write_text(text)
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *folders)
    self.assertEqual(status, 1, out)
    self.assertIn("rank 1 compiled 2", out)

  def test_several_modules_a_rank_are_not_proved_as_a_sequence(self):
    # Issue 77, defect 4: rank 1 calls g before f. The dumps hold each
    # module, not the order each rank ran them in: never "proved".
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    folders = write_dumps(texts, record=False)
    for folder, text in zip(folders, texts, strict=True):
      (
        pathlib.Path(folder)
        / "module_0002.jit_other.cpu_after_optimizations.txt"
      ).write_text(text.replace("HloModule jit_", "HloModule jit_other_", 1))
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *folders)
      self.assertEqual(status, 2, out)
      # Without a record, the layout of their communicator is not known
      # either: their sendrecv's peers prove nothing.
      self.assertIn("0 proved, 2 on communicators not seen", out)
      self.assertIn("NOT PROVED: a rank compiled 2 communicating modules", out)
      status, out, _ = self.run_command("--ranks", *folders, "--json")
    self.assertEqual(json.loads(out)["status"], 2)

  def test_modules_are_paired_by_number_not_by_name(self):
    # module_10000 was compiled after module_9999 (XLA's numbers grow
    # past four digits): by name it sorts first. No record: the modules
    # are paired in compile order.
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    folders = write_dumps(texts, record=False)
    for folder, text in zip(folders, texts, strict=True):
      (only,) = os.listdir(folder)
      (pathlib.Path(folder) / only).unlink()
      for number, name in ((9999, "first"), (10000, "second")):
        renamed = text.replace("HloModule jit_", f"HloModule jit_{name}_", 1)
        (
          pathlib.Path(folder)
          / f"module_{number:04d}.jit_{name}.cpu_after_optimizations.txt"
        ).write_text(renamed)
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *folders, "--json")
    modules = [m["module"] for m in json.loads(out)["modules"]]
    self.assertEqual([m.split("_")[1] for m in modules], ["first", "second"])
    self.assertEqual(status, 2)  # Two modules a rank: see above.

  def test_no_communicating_module_is_nothing_proved(self):
    # Issue 77: nothing compared is no proof (exit 2), as for the
    # sanitizer's merge.
    status, out, _ = self.run_command(
      "--ranks", *self.dumps([_plain_module(), _plain_module()])
    )
    self.assertEqual(status, 2, out)
    self.assertIn("nothing proved", out)

  def test_control_one_module_a_rank_is_proved(self):
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    with shipped_mpi4jax():
      status, out, _ = self.run_command("--ranks", *self.dumps(texts))
    self.assertEqual(status, 0, out)
    self.assertNotIn("NOT PROVED", out)

  def test_one_module_a_rank_without_a_record_is_not_proved(self):
    # How many times each rank ran its module is in no dump: a Python
    # loop that runs it twice on rank 0 and three times on rank 1 hangs
    # (a skeptic's shape of issue 77, once "proved").
    texts = [(DATA / f"mpi4jax_rank{r}_of_2.txt").read_text() for r in (0, 1)]
    with shipped_mpi4jax():
      folders = write_dumps(texts, record=False)
      status, out, err = self.run_command("--ranks", *folders)
    self.assertEqual(status, 2, out + err)
    self.assertIn("how many times each rank ran it", out + err)
    self.assertIn("holds no execution record", out + err)

  def test_no_such_folder_exits_2(self):
    status, _, err = self.run_command("--ranks", "/no/such/folder", "/no")
    self.assertEqual(status, 2)
    self.assertIn("no such file or directory", err)


class CollectivesInEveryBranchTest(absltest.TestCase):
  """Issue 77, defect 6: the docs' own fix (the decision reduced across
  ranks first) with a collective in both branches of a ``cond``, or in
  two branches of a 3-way ``switch``, crashed the order analysis
  (IndexError in ``Reach._combine``: the conditional is itself a
  selected op, and its branches' calls lie under it)."""

  @staticmethod
  def both(rank, x, sizes=(1, 1)):
    decision = allreduce(jnp.sum(x))
    return jax.lax.cond(
      decision > 0,
      lambda v: allreduce(v),
      lambda v: allreduce(jnp.tile(v, sizes[rank])).sum() * v,
      x,
    )

  @staticmethod
  def switch(rank, x):
    del rank
    decision = allreduce(jnp.sum(x)).astype(jnp.int32) % 3
    return jax.lax.switch(
      decision, [allreduce, lambda v: v, lambda v: allreduce(v * 3.0)], x
    )

  def test_a_collective_in_both_branches_is_proved(self):
    result = check(self.both)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 3)  # the decision's, then each branch's

  def test_a_three_way_switch_is_proved(self):
    result = check(self.switch)
    self.assertEqual(result.verdict, "proved", result.text())

  def test_control_branches_that_differ_across_ranks_are_a_mismatch(self):
    # The same shape still compares the branches: rank 1's second branch
    # reduces twice the data.
    result = check(functools.partial(self.both, sizes=(1, 2)))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("f32[8]", result.mismatch.differs)


class RankVaryingConstantsTest(absltest.TestCase):
  """Issue 77, defect 1: each rank compiles its own module, so a constant
  may differ between ranks though each module holds it as a constant. A
  decision that reads one, around a collective, differs between ranks:
  rank 0 computes wrong values and rank 1 hangs. Each shape beside its
  control, where every rank holds the same constant."""

  @staticmethod
  def fori(rank, x, extra=(0, 1)):
    # Runs 3 + rank times: the dumps' known_trip_count are 3 and 4.
    return jax.lax.fori_loop(0, 3 + extra[rank], lambda i, v: allreduce(v), x)

  @staticmethod
  def threshold(rank, x, limits=(0.0, 1.0)):
    decision = allreduce(jnp.sum(x))  # the same on every rank
    return jax.lax.cond(decision > limits[rank], allreduce, lambda v: v, x)

  @staticmethod
  def residual(rank, x, limits=(0.0, 1.0)):
    def body(carry):
      v = allreduce(carry[0] * 0.5)
      return v, allreduce(jnp.abs(v).sum())

    return jax.lax.while_loop(
      lambda carry: carry[1] > limits[rank], body, (x, jnp.float32(9.0))
    )

  @staticmethod
  def psum_fori(rank, x, extra=(0, 1)):
    def body(v):
      return jax.lax.fori_loop(
        0, 3 + extra[rank], lambda i, w: jax.lax.psum(w, "x"), v
      )

    return on_mesh(body)(x)

  def assert_differs(self, result, construct, rank0, rank1):
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    (found,) = result.rank_dependent
    self.assertEqual(found.construct, construct)
    self.assertEqual(found.ranks, (0, 1))
    self.assertIn(f"rank 0: constant {rank0}", found.depends_on)
    self.assertIn(f"rank 1: constant {rank1}", found.depends_on)
    self.assertRegex(found.label, r" at \S+:\d+")
    self.assertIn("constant that differs between the ranks", result.text())

  def test_a_trip_count_that_differs_between_ranks(self):
    self.assert_differs(check(self.fori), "loop", "s32[] 3", "s32[] 4")

  def test_control_the_same_trip_count_is_proved(self):
    result = check(functools.partial(self.fori, extra=(1, 1)))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_a_cond_on_a_shared_value_and_a_per_rank_threshold(self):
    self.assert_differs(
      check(self.threshold), "conditional", "f32[] 0", "f32[] 1"
    )

  def test_control_one_threshold_is_proved(self):
    result = check(functools.partial(self.threshold, limits=(1.0, 1.0)))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_a_while_on_a_shared_residual_and_a_per_rank_limit(self):
    self.assert_differs(check(self.residual), "loop", "f32[] 0", "f32[] 1")

  def test_control_one_limit_is_proved(self):
    result = check(functools.partial(self.residual, limits=(1.0, 1.0)))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_xla_psum_in_a_loop_of_a_per_rank_trip_count(self):
    self.assert_differs(check(self.psum_fori), "loop", "s32[] 3", "s32[] 4")
    result = check(functools.partial(self.psum_fori, extra=(0, 0)))
    self.assertEqual(result.verdict, "proved", result.text())  # control

  def test_a_per_rank_scale_of_the_data_is_no_difference(self):
    # Only what the decision reads is compared: rank 1 scales the data it
    # reduces, and the loop's decision reads the shared result.
    def program(rank, x):
      def body(carry):
        v = allreduce(carry[0] * (0.5 + rank))
        return v, allreduce(jnp.abs(v).sum())

      return jax.lax.while_loop(
        lambda carry: carry[1] > 1.0, body, (x, jnp.float32(9.0))
      )

    result = check(program)
    self.assertEqual(result.verdict, "proved", result.text())


class SubgroupTest(absltest.TestCase):
  """Issue 77, defect 2: 2 processes x 2 devices, the decision a psum over
  one process's devices (``replica_groups={{0,1},{2,3}}``): each group
  has its own result, so the ranks may decide differently around the
  psum over every device, and hang."""

  @staticmethod
  def program(rank, x, axes):
    del rank
    mesh = jax.make_mesh(
      (2, 2), ("p", "d"), axis_types=(jax.sharding.AxisType.Auto,) * 2
    )

    def body(v):
      decision = jax.lax.psum(v.sum(), axes)
      return jax.lax.cond(
        decision > 0, lambda w: jax.lax.psum(w, ("p", "d")), lambda w: w, v
      )

    return jax.shard_map(
      body,
      mesh=mesh,
      in_specs=jax.sharding.PartitionSpec(("p", "d")),
      out_specs=jax.sharding.PartitionSpec(("p", "d")),
      check_vma=False,
    )(x)

  def test_a_decision_reduced_within_one_process_is_rank_dependent(self):
    result = check(functools.partial(self.program, axes="d"))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    (found,) = result.rank_dependent
    self.assertEqual(found.construct, "conditional")
    self.assertIn("over replica groups", found.depends_on)
    self.assertIn("the same only within each group", found.depends_on)

  def test_control_a_decision_reduced_over_every_device_is_proved(self):
    result = check(functools.partial(self.program, axes=("p", "d")))
    self.assertEqual(result.verdict, "proved", result.text())

  # The decision psum's replica_groups as each XLA writes it: jax 0.10's
  # list, the iota form, and jax 0.12's mesh axes (the groups reduce over
  # the axes in braces). Written into the module of either jax version.
  SPLIT = (
    "{{0,1},{2,3}}",
    "[2,2]<=[4]",
    "mesh['p'=2,'d'=2] {'d'}",
    "mesh['p'=2,'d'=2]<=[4] {'d'}",
    "mesh['x'=4] {'x':(1)2}",  # A sub-axis of size 2: groups of 2.
  )
  WHOLE = (
    "{{0,1,2,3}}",
    "[1,4]<=[4]",
    "mesh['p'=2,'d'=2] {'p','d'}",
    "mesh['p'=2,'d'=2] {'d','p'}",
  )
  # Forms not read: never taken as one group (soundness).
  UNREAD = (
    "mesh['p'=2,'d'=2] {'q'}",
    "mesh['p'=2,'d'=2] {'d':(2)}",
    "mesh['p'=2,'d'=2] {'d','d'}",  # Would make one group of 4.
    "mesh['p'=2,'d'=2] {'d':(1)4}",  # A sub-axis larger than its axis.
    "mesh<2x2> {'p','d'}",
    "groups(p, d)",
  )

  def with_groups(self, groups: str) -> list[str]:
    """The modules of the control, the decision psum's replica_groups
    written as `groups`."""
    texts = []
    for rank in range(2):
      text = (
        jax.jit(functools.partial(self.program, rank, axes=("p", "d")))
        .lower(jax.ShapeDtypeStruct((4,), jnp.float32))
        .compile()
        .as_text()
      )
      assert text is not None
      lines = text.splitlines()
      (k,) = [
        n
        for n, line in enumerate(lines)
        # The decision's psum (jax 0.6 names it shmap_body/psum, later
        # ones shard_map/psum), not the one in the cond's branch.
        if " all-reduce(" in line and '/psum"' in line and "branch_" not in line
      ]
      old = raw_attribute(lines[k], "replica_groups")
      assert old is not None, lines[k]
      lines[k] = lines[k].replace(
        f"replica_groups={old}", f"replica_groups={groups}", 1
      )
      texts.append("\n".join(lines) + "\n")
    return texts

  def test_each_written_form_of_groups_within_one_process(self):
    for groups in self.SPLIT:
      with self.subTest(groups=groups):
        result = races_across(self.with_groups(groups))
        self.assertEqual(result.verdict, "rank-dependent", result.text())
        (found,) = result.rank_dependent
        self.assertIn(f"over replica groups {groups}:", found.depends_on)

  def test_each_written_form_of_one_group_is_proved(self):
    for groups in self.WHOLE:
      with self.subTest(groups=groups):
        result = races_across(self.with_groups(groups))
        self.assertEqual(result.verdict, "proved", result.text())

  def test_groups_in_a_form_not_read_are_not_one_group(self):
    for groups in self.UNREAD:
      with self.subTest(groups=groups):
        result = races_across(self.with_groups(groups))
        self.assertEqual(result.verdict, "rank-dependent", result.text())


class SwapTest(absltest.TestCase):
  """Issue 77, defect 5: two collectives of one type in another order on
  one rank. MPI matches them by count and type, so the program runs,
  with each rank's data in the other's call: 200/200 wrong values, and
  "proved". Each call's operand origin tells them apart. (Both operands
  are computed from one argument: two arguments of one type could be
  passed the other way round by a caller, see ArgumentSwapTest.)"""

  @staticmethod
  def program(rank, x, swap=True, local=False):
    a, b = jnp.sin(x), jnp.cos(x)
    if local and rank == 1:  # rank 1 computes its operands its own way
      a, b = jnp.cos(a), jnp.cos(b)
    if swap and rank == 1:
      a, b = b, a
    first = allreduce(a)
    return first, allreduce(entangle(b, first))

  def test_a_swap_of_one_size_is_a_mismatch(self):
    result = check(self.program)
    if test_util.jax_version() < (0, 7):
      # jax 0.6's modules give each rank's operands origins of their own
      # (measured: no digest shared), so nothing tells the calls apart:
      # matched by type only, not proved either.
      self.assertEqual(result.verdict, "matched-by-type", result.text())
      return
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("the two calls are swapped", result.mismatch.differs)
    self.assertEqual([c.index for c in result.mismatch.calls if c], [1, 1])

  def test_control_the_same_order_is_proved(self):
    result = check(functools.partial(self.program, swap=False))
    self.assertEqual(result.verdict, "proved", result.text())

  def test_origins_that_cannot_tell_the_calls_apart_are_not_proved(self):
    result = check(functools.partial(self.program, swap=False, local=True))
    self.assertEqual(result.verdict, "matched-by-type", result.text())
    self.assertEqual(result.status, 2)
    self.assertFalse(result.proved)
    (said,) = result.by_type_only
    self.assertIn("calls 1 and 2", said)
    self.assertIn("could be swapped", said)
    self.assertIn("NOT proved", result.text())

  def test_the_same_expression_twice_needs_no_telling_apart(self):
    # Control: both calls reduce the same value on every rank, so a swap
    # changes nothing.
    def program(rank, x):
      del rank
      first = allreduce(x)
      return first, allreduce(entangle(x, first))

    self.assertEqual(check(program).verdict, "proved")


class ArgumentSwapTest(absltest.TestCase):
  """Skeptic pass 77b, U2: ``step(g, s)`` allreduces `g`, then `s`, and
  rank 1 calls ``step(s, g)``. Each rank compiles the same module, whose
  origins name the operands "entry parameter 0" and "1" on both, so the
  swap was proved: every value wrong. Two calls that send different
  entry parameters of one type are matched by type only."""

  F4 = jax.ShapeDtypeStruct((4,), jnp.float32)

  @staticmethod
  def two_calls(rank, g, s):
    del rank
    first = allreduce(g)
    return first, allreduce(entangle(s, first))

  def test_two_parameters_of_one_type_are_matched_by_type_only(self):
    result = check(self.two_calls, 2, self.F4, self.F4)
    self.assertEqual(result.verdict, "matched-by-type", result.text())
    self.assertEqual(result.status, 2)
    (said,) = result.by_type_only
    self.assertIn("calls 1 and 2", said)
    self.assertRegex(said, r"entry parameters 0 \(%\S+\) and 1 \(%\S+\)")
    self.assertIn("f32[4]", said)

  def test_a_parameter_and_an_expression_of_both_are_matched_by_type_only(
    self,
  ):
    def program(rank, g, s):
      del rank
      first = allreduce(g)
      return first, allreduce(entangle(g + s, first))

    result = check(program, 2, self.F4, self.F4)
    self.assertEqual(result.verdict, "matched-by-type", result.text())

  def test_one_call_of_two_parameters_is_matched_by_type_only(self):
    # XLA merges two psums into one all-reduce of both (jax.distributed).
    def program(rank, g, s):
      del rank
      return on_mesh(lambda a, b: jax.lax.psum((a, b), "x"))(g, s)

    result = check(program, 2, self.F4, self.F4)
    if test_util.jax_version() < (0, 7):
      # jax 0.6's XLA keeps the two psums apart, and nothing orders them:
      # a possible deadlock, not proved either.
      self.assertEqual(result.verdict, "deadlock", result.text())
      return
    self.assertEqual(result.verdict, "matched-by-type", result.text())
    self.assertIn("operands 0 and 1", result.by_type_only[0])

  def test_control_parameters_of_different_types_are_proved(self):
    for second in (
      jax.ShapeDtypeStruct((2, 2), jnp.float32),  # one MPI type, f32[4]
      jax.ShapeDtypeStruct((4,), jnp.int32),
    ):
      result = check(self.two_calls, 2, self.F4, second)
      self.assertEqual(result.verdict, "proved", result.text())

  def test_control_one_parameter_feeding_both_is_proved(self):
    def program(rank, g, s):
      del rank, s
      first = allreduce(g)
      return first, allreduce(entangle(g * 2.0, first))

    result = check(program, 2, self.F4, self.F4)
    self.assertEqual(result.verdict, "proved", result.text())


class PathArgumentTest(absltest.TestCase):
  """Skeptic pass 77b, C2: `races_across` given a str that is the path of
  a dumped module read it as module text, and said so in a message that
  repeated itself; a ``pathlib.Path`` worked."""

  @staticmethod
  def program(rank, x):
    del rank
    return allreduce(x)

  def files(self) -> list[str]:
    texts = [
      str(
        jax.jit(functools.partial(self.program, rank))
        .lower(jax.ShapeDtypeStruct((4,), jnp.float32))
        .compile()
        .as_text()
      )
      for rank in range(2)
    ]
    return [
      str(next(pathlib.Path(f).glob("*.txt")))
      for f in write_dumps(texts, record=False)
    ]

  def test_a_str_path_is_read_as_a_pathlib_path_is(self):
    files = self.files()
    layouts = [{7: range(2)}] * 2  # The allreduces' communicator: both.
    as_str = races_across(
      files, declarations=declarations(), communicators=layouts
    )
    as_path = races_across(
      [pathlib.Path(f) for f in files],
      declarations=declarations(),
      communicators=layouts,
    )
    self.assertEqual(as_path.verdict, "proved", as_path.text())
    self.assertEqual(as_str.verdict, "proved", as_str.text())

  def test_a_str_that_is_no_file_is_named(self):
    missing = os.path.join(tempfile.mkdtemp(), "module.txt")
    with self.assertRaises(ValueError) as raised:
      races_across([missing, self.files()[1]], declarations=declarations())
    said = str(raised.exception)
    self.assertIn(f"modules[0] is {missing!r}", said)
    self.assertIn("neither a module's HLO text nor an existing file", said)

  def test_text_that_is_no_module_is_said_once(self):
    with self.assertRaises(ValueError) as raised:
      races_across(["not\na module"], declarations=declarations())
    said = str(raised.exception)
    self.assertTrue(said.startswith("races_across: rank 0: "), said)
    self.assertEqual(said.count("Pass jax.jit"), 1, said)


class UnrolledLoopTest(absltest.TestCase):
  """Skeptic pass 77b, F4: ``scan(length=4, unroll=1 + rank)`` around an
  allreduce: rank 0 loops 4 times over one call, rank 1 twice over two,
  the same 4 calls in one order (it ran right). The loops, one step each,
  were rank-dependent (trip counts 4 and 2) and a deadlock. The
  simulation runs a loop XLA knows the trip count of, whose body makes
  calls only, as that many bodies."""

  @staticmethod
  def program(rank, x, length=lambda rank: 4, unroll=lambda rank: 1):
    def step(c, _):
      return allreduce(c) * 0.5, None

    n = length(rank)
    return jax.lax.scan(step, x, None, length=n, unroll=unroll(rank))[0]

  def test_a_scan_unrolled_differently_is_no_finding(self):
    for unroll in (lambda r: 1 + r, lambda r: 1 + 3 * r):
      result = check(functools.partial(self.program, unroll=unroll))
      # Not proved: origins do not follow the carry across iterations.
      self.assertEqual(result.verdict, "matched-by-type", result.text())
      self.assertEqual(result.status, 2)
      self.assertLen(result.matched, 4)
      self.assertIn("unroll differently", result.by_type_only[0])

  def test_control_another_trip_count_is_reported(self):
    result = check(functools.partial(self.program, length=lambda r: 4 - r))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    self.assertIn("s32[] 4", result.rank_dependent[0].depends_on)

  def test_control_a_decision_on_the_counter_inside_is_reported(self):
    # Three trips each, counting from the rank: rank 0 allreduces at 0
    # and 2, rank 1 at 2 only (it hangs). Unrolled, each conditional
    # would read "the counter" alike: the loop's carry is compared.
    def program(rank, x):
      def body(state):
        i, v = state
        v = jax.lax.cond(i % 2 == 0, allreduce, lambda w: w, v)
        return i + 1, v

      return jax.lax.while_loop(lambda s: s[0] < rank + 3, body, (rank, x))[1]

    result = check(program)
    self.assertEqual(result.verdict, "rank-dependent", result.text())


class ScatterTest(absltest.TestCase):
  """Skeptic pass 77b, U1 and F1: mpi4jax's scatter was compared by its
  operand's element count. The root's operand holds every rank's block
  (``(nranks, 4)``), another rank's is one block (``f32[4]``): every
  right scatter was a mismatch, and every rank passing the root's
  ``(3, 4)`` (non-roots then read 12 elements where 4 arrive: garbage)
  was proved. MPI matches the block each rank receives."""

  @staticmethod
  def program(rank, x):
    return scatter(rank, x)

  def test_the_right_shapes_are_proved(self):
    for shapes in ([(2, 4), (4,)], [(3, 4), (4,), (4,)]):
      result = check_shapes(self.program, shapes)
      self.assertEqual(result.verdict, "proved", result.text())

  def test_every_rank_passing_the_roots_shape_is_a_mismatch(self):
    result = check_shapes(self.program, [(3, 4)] * 3)
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("received", result.mismatch.differs)
    self.assertIn("f32[12]", result.mismatch.differs)

  def test_a_longer_placeholder_on_one_rank_is_a_mismatch(self):
    result = check_shapes(self.program, [(2, 4), (8,)])
    self.assertEqual(result.verdict, "mismatch", result.text())

  def test_a_declaration_names_a_bad_matched_by(self):
    with self.assertRaisesRegex(ValueError, "matched_by must be one of"):
      table.from_table(
        {"targets": {"x": {"communicates": {"matched_by": "result"}}}}, "t"
      )
    with self.assertRaisesRegex(
      ValueError, "root and matched_by are for a collective"
    ):
      Communication("send", peer="dest", matched_by="results")

  def test_control_the_operands_alone_would_say_the_opposite(self):
    # The shipped declaration is what makes the difference: compared by
    # operands, as a plain collective, the right shapes differ.
    plain = dataclasses.replace(
      shipped_communication("mpi_scatter_ffi"), matched_by="operands"
    )
    with mock.patch(__name__ + ".shipped_communication", lambda _: plain):
      right = check_shapes(self.program, [(2, 4), (4,)])
      wrong = check_shapes(self.program, [(3, 4)] * 3)
    self.assertEqual(right.verdict, "mismatch", right.text())
    self.assertEqual(wrong.verdict, "proved", wrong.text())


class BroadcastDecisionTest(absltest.TestCase):
  """Skeptic pass 77b, F2: rank 0 decides, broadcasts the decision, and
  every rank branches on it around an allreduce: right, and
  "rank-dependent", because mpi4jax's bcast hands the root its own input
  back, an entry parameter. Every rank's result of the broadcast is that
  input, so on the root it is the same on every rank."""

  @staticmethod
  def program(rank, x, root=0, decide_on="received"):
    got, raw = bcast(rank, x, root)
    x = entangle(x, raw)  # The branch after the broadcast.
    decision = entangle(got, raw) if decide_on == "received" else x
    return jax.lax.cond(jnp.sum(decision) > 5, allreduce, lambda v: v, x)

  def test_a_decision_on_the_broadcast_is_proved(self):
    for count, root in ((2, 0), (2, 1), (3, 1)):
      result = check(functools.partial(self.program, root=root), count)
      self.assertEqual(result.verdict, "proved", (root, result.text()))

  def test_control_a_decision_on_each_ranks_own_input_is_reported(self):
    result = check(functools.partial(self.program, decide_on="own"))
    self.assertEqual(result.verdict, "rank-dependent", result.text())
    # Rank 1 decides on its own input; the root's is what it sends.
    local = [r for r in result.rank_dependent if r.ranks == (1,)]
    self.assertLen(local, 1, result.text())
    self.assertIn("entry parameter 0", local[0].depends_on)

  def test_control_the_root_deciding_otherwise_is_reported(self):
    # The root decides on its input plus one, the others on what they
    # receive: the same on each rank, computed differently.
    def program(rank, x):
      got, raw = bcast(rank, x)
      decision = entangle(got + 1.0 if rank == 0 else got, raw)
      x = entangle(x, raw)
      return jax.lax.cond(jnp.sum(decision) > 5, allreduce, lambda v: v, x)

    result = check(program)
    self.assertEqual(result.verdict, "rank-dependent", result.text())

  def test_without_the_rank_the_root_is_not_known(self):
    # RankProgram without its rank takes no rank for the root: the
    # root's decision reads an entry parameter, as before.
    modules = [
      ranks.RankProgram(
        jax.jit(functools.partial(self.program, rank))
        .lower(jax.ShapeDtypeStruct((4,), jnp.float32))
        .compile(),
        declarations(),
      )
      for rank in range(2)
    ]
    result = across_ranks.check_programs(modules)
    self.assertEqual(result.verdict, "rank-dependent", result.text())


class WildcardReceiveTest(absltest.TestCase):
  """Issue 77, defect 3: three ranks, rank 0 receives from any rank, then
  from rank 2; ranks 1 and 2 each send to it once. When the first receive
  meets rank 2's send, the second waits for ever: it hung, and the check
  said "proved ... recv from rank -1"."""

  @staticmethod
  def program(rank, x, second_source=2):
    if rank == 0:
      got = recv(x, (4,), source=-1)
      return recv(got, (4,), source=second_source)
    return send(x, dest=0)

  def test_a_matching_that_deadlocks_is_reported(self):
    result = check(self.program, 3)
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    self.assertIn("meets rank 2's send", result.deadlock.matching)
    blocked = result.deadlock.blocked[0]
    assert blocked is not None
    self.assertIn("recv", blocked.label)
    self.assertIn("from rank 2", blocked.label)
    self.assertIn("when rank 0's receive from any rank", result.text())

  def test_control_two_receives_from_any_rank_are_proved(self):
    result = check(functools.partial(self.program, second_source=-1), 3)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)


class UndeclaredCallsTest(absltest.TestCase):
  """Issue 77, defect 8: an ``io_callback`` doing host MPI under
  ``jax.distributed``, or a binding nobody declared, was "no
  communicating calls, nothing to compare", exit 0. Both are now
  compared across ranks as calls that may communicate."""

  @staticmethod
  def callback(rank, x, on=(0, 1)):
    if rank in on:
      x = io_callback(lambda v: v, jax.ShapeDtypeStruct((4,), jnp.float32), x)
    return x * 2.0

  def test_an_io_callback_on_one_rank_only_deadlocks(self):
    result = check(functools.partial(self.callback, on=(0,)))
    self.assertEqual(result.verdict, "deadlock", result.text())
    self.assertIn("possibly communicating (undeclared)", result.text())

  def test_control_an_io_callback_on_every_rank_is_matched(self):
    result = check(self.callback)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)

  def test_a_debug_callback_on_one_rank_is_no_call(self):
    # Control: jax.debug.callback and pure_callback do not communicate.
    def program(rank, x):
      if rank == 0:
        jax.debug.callback(lambda v: None, x)
        x = jax.pure_callback(
          lambda v: v, jax.ShapeDtypeStruct((4,), jnp.float32), x
        )
      return allreduce(x)

    result = check(program)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)

  def test_an_undeclared_native_call_is_compared(self):
    # The test's allreduce target, its declaration left out: rank 1 makes
    # one more call.
    def program(rank, x):
      x = allreduce(x)
      return allreduce(entangle(x * 2.0, x)) if rank == 1 else x

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    modules = [
      jax.jit(functools.partial(program, r)).lower(x).compile() for r in (0, 1)
    ]
    result = races_across(modules, declarations=sources.BUILT_IN)
    self.assertEqual(result.verdict, "deadlock", result.text())
    self.assertIn(f"possibly communicating (undeclared) {ALLREDUCE}",
                  result.text())  # fmt: skip
    # Control: declared, the same verdict for the declared reason.
    declared = races_across(modules, declarations=declarations())
    self.assertEqual(declared.verdict, "deadlock", declared.text())
    self.assertNotIn("undeclared", declared.text())


class CountAndTypeTest(absltest.TestCase):
  """Issue 77, defect 7: MPI matches a message's count and type, not its
  shape. f32[2,2] on one rank and f32[4] on the other is a match, which
  the check called a mismatch."""

  @staticmethod
  def program(rank, x, count=4):
    return allreduce(x.reshape(2, 2) if rank == 0 else x[:count])

  def test_one_count_in_two_shapes_is_proved(self):
    result = check(self.program)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertIn("f32[2,2]", result.text())  # The label keeps the shape.

  def test_control_another_count_is_a_mismatch(self):
    result = check(functools.partial(self.program, count=2))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("f32[4]", result.mismatch.differs)
    self.assertIn("f32[2]", result.mismatch.differs)


class NegatedBranchesTest(absltest.TestCase):
  """Issue 77, defect 7: rank 1 writes ``cond(not p, noop, allreduce)``
  where rank 0 writes ``cond(p, allreduce, noop)``: one decision, the
  branches the other way round. Branches are matched by the predicate
  with its negations taken off, not by their index."""

  @staticmethod
  def program(rank, x, negate=True, limits=(0.0, 0.0)):
    p = allreduce(jnp.sum(x)) > limits[rank]
    if rank == 1 and negate:
      return jax.lax.cond(jnp.logical_not(p), lambda v: v, allreduce, x)
    return jax.lax.cond(p, allreduce, lambda v: v, x)

  def test_the_negated_decision_with_swapped_branches_is_proved(self):
    result = check(self.program)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)

  def test_control_negated_without_swapping_the_branches(self):
    # cond(not p, allreduce, noop): rank 1 reduces where rank 0 does not.
    def program(rank, x):
      p = allreduce(jnp.sum(x)) > 0
      if rank == 1:
        p = jnp.logical_not(p)
      return jax.lax.cond(p, allreduce, lambda v: v, x)

    result = check(program)
    self.assertNotEqual(result.verdict, "proved", result.text())

  def test_control_a_negated_decision_on_another_threshold(self):
    result = check(functools.partial(self.program, limits=(0.0, 1.0)))
    self.assertEqual(result.verdict, "rank-dependent", result.text())

  # Rank 1's predicate, written as a negation of rank 0's `p` (odd: its
  # branches must be the other way round) or as `p` itself (even).
  NEGATIONS = (
    ("not not p", lambda p: jnp.logical_not(jnp.logical_not(p)), False),
    (
      "not not not p",
      lambda p: jnp.logical_not(jnp.logical_not(jnp.logical_not(p))),
      True,
    ),
    ("p == False", lambda p: p == False, True),  # noqa: E712
    ("p != True", lambda p: p != True, True),  # noqa: E712
    ("p ^ True", lambda p: p ^ True, True),
    ("p == True", lambda p: p == True, False),  # noqa: E712
    ("not (p != False)", lambda p: jnp.logical_not(p != False), True),  # noqa: E712
  )

  @staticmethod
  def written(rank, x, predicate, swap):
    p = allreduce(jnp.sum(x)) > 0.0
    if rank == 1:
      branches = (lambda v: v, allreduce) if swap else (allreduce, lambda v: v)
      return jax.lax.cond(predicate(p), *branches, x)
    return jax.lax.cond(p, allreduce, lambda v: v, x)

  def test_nested_and_constant_negations_are_proved(self):
    # Issue 77: one `not` was understood; `p == False` and `p ^ True` were
    # a false alarm (rank-dependent), nested ones are checked here too.
    for name, predicate, odd in self.NEGATIONS:
      with self.subTest(name):
        result = check(
          functools.partial(self.written, predicate=predicate, swap=odd)
        )
        self.assertEqual(result.verdict, "proved", result.text())

  def test_control_the_branches_the_wrong_way_round_are_no_proof(self):
    # The same predicates with the branches as rank 0 has them where the
    # predicate negates (and swapped where it does not): rank 1 reduces
    # where rank 0 does not, and the ranks hang.
    for name, predicate, odd in self.NEGATIONS:
      with self.subTest(name):
        result = check(
          functools.partial(self.written, predicate=predicate, swap=not odd)
        )
        self.assertNotEqual(result.verdict, "proved", result.text())


class CrashIsNoFindingTest(absltest.TestCase):
  """Issue 77: a crash of the cross-rank check exits 2 with its cause
  ("could not answer"), never 1, the status of a problem found."""

  def dumps(self, program) -> list[str]:
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    texts = [
      str(jax.jit(functools.partial(program, r)).lower(x).compile().as_text())
      for r in (0, 1)
    ]
    return write_dumps(texts)

  def run_command(self, folders) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sources, "of_pyproject", lambda _: declarations()):
      status = command.main(["--ranks", *folders], out=out, err=err)
    return status, out.getvalue(), err.getvalue()

  def test_a_crash_comparing_the_ranks_exits_2_with_its_cause(self):
    folders = self.dumps(CollectivesInEveryBranchTest.both)
    boom = IndexError("tuple index out of range")
    # Whether it follows the ranks' records or pairs their modules.
    with (
      mock.patch.object(command, "check_programs", side_effect=boom),
      mock.patch.object(rank_sequences, "check_executions", side_effect=boom),
    ):
      status, _, err = self.run_command(folders)
    self.assertEqual(status, 2, err)
    self.assertIn("could not answer", err)
    self.assertIn("IndexError: tuple index out of range", err)

  def test_a_limit_of_the_model_is_no_crash(self):
    # Nine receives from any source on rank 0, each of which rank 1 or 2
    # may meet: 512 matchings, past `wildcards.LIMIT` (256). The check
    # says so, exit 2, and asks for no report (skeptic pass 77b).
    def program(rank, x):
      if rank == 0:
        token = x
        for _ in range(9):
          token = recv(token, (4,), source=-1)
        return token
      token = x
      for _ in range(5 if rank == 1 else 4):
        token = send(token, dest=0)
      return token

    spec = jax.ShapeDtypeStruct((4,), jnp.float32)
    texts = [
      str(
        jax.jit(functools.partial(program, r)).lower(spec).compile().as_text()
      )
      for r in (0, 1, 2)
    ]
    status, _, err = self.run_command(write_dumps(texts))
    self.assertEqual(status, 2, err)
    self.assertIn("could not answer: 9 receives from any source", err)
    self.assertIn("more than 256", err)
    self.assertNotIn("crashed", err)
    self.assertNotIn("Please report", err)

  def test_a_crash_reading_a_rank_exits_2_naming_the_rank(self):
    folders = self.dumps(CollectivesInEveryBranchTest.both)
    with mock.patch.object(command, "RankProgram", side_effect=KeyError("x")):
      status, _, err = self.run_command(folders)
    self.assertEqual(status, 2, err)
    self.assertIn("crashed (rank 0: ", err)

  def test_the_plugin_fails_a_run_on_a_finding_not_on_a_crash(self):
    from entangle_jax.testing._ways_in import plugin

    folders = self.dumps(CollectivesInEveryBranchTest.both)
    boom = IndexError("tuple index out of range")
    with (
      mock.patch.object(command, "check_programs", side_effect=boom),
      mock.patch.object(rank_sequences, "check_executions", side_effect=boom),
    ):
      crashed = self.run_command(folders)
    self.assertEqual(crashed[0], 2, crashed[2])
    self.assertFalse(plugin.across_fails((crashed[2], crashed[0])))
    # Control: a mismatch (status 1) fails it, a proof does not.
    mismatch = self.run_command(
      self.dumps(
        functools.partial(CollectivesInEveryBranchTest.both, sizes=(1, 2))
      )
    )
    self.assertEqual(mismatch[0], 1, mismatch[1])
    self.assertTrue(plugin.across_fails((mismatch[1], mismatch[0])))
    self.assertFalse(plugin.across_fails(("Proved", 0)))

  def test_control_the_same_dumps_are_proved(self):
    status, out, err = self.run_command(
      self.dumps(CollectivesInEveryBranchTest.both)
    )
    self.assertEqual(status, 0, out + err)
    self.assertIn("Proved", out)


def _plain_module() -> str:
  """A compiled module that makes no communicating call."""
  x = jax.ShapeDtypeStruct((4,), jnp.float32)
  return str(jax.jit(jnp.sin).lower(x).compile().as_text())


def write_dumps(texts: list[str], record: bool = True) -> list[str]:
  """One dump folder per rank, each holding its rank's module of `texts`
  and, with `record`, a record of it run once (without one, the command
  cannot know how many times each rank ran its module: not proved)."""
  root = pathlib.Path(tempfile.mkdtemp())
  folders = []
  for rank, text in enumerate(texts):
    folder = root / f"rank{rank}"
    folder.mkdir()
    name = "module_0001.jit_program.cpu_after_optimizations.txt"
    (folder / name).write_text(text)
    if record:
      # As record_executions writes it where each communicator spans
      # every rank in the world's numbering (mpi4jax's default).
      (layouts,) = test_util.world_numbered([text], every_declaration())
      record_each_once(folder, rank, dict.fromkeys(layouts, range(len(texts))))
    folders.append(str(folder))
  return folders


def every_declaration() -> Declarations:
  """mpi4jax's shipped declarations, this file's and the built-in ones."""
  (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
  return merged(
    [binding.declarations(), declarations(), sources.BUILT_IN], distinct=False
  )


def record_each_once(
  folder: pathlib.Path,
  rank: int | None = None,
  layouts: dict[int, range] | None = None,
) -> None:
  """An execution record (`record_executions`') in `folder`: each module
  of its dump run once, in compile order; with `rank`, written by that
  world rank, with the communicators' `layouts`."""
  executions = []
  for path in sorted(folder.glob("module_*.cpu_after_optimizations.txt")):
    number = int(path.name.split(".")[0].removeprefix("module_"))
    name = dumped_module.module_name(path.read_text()) or path.name
    executions.append({"module": number, "name": name})
  data: dict[str, object] = {
    "format": rank_sequences.RECORD_FORMAT,
    "complete": True,
    "executions": executions,
  }
  if rank is not None:
    data["world_rank"] = rank
    data["communicators"] = [
      {"handle": handle, "world_ranks": list(world)}
      for handle, world in (layouts or {}).items()
    ]
  (folder / rank_sequences.RECORD).write_text(json.dumps(data))


def shipped_mpi4jax():
  """The shipped mpi4jax declarations in effect, as if mpi4jax 0.9.1 were
  installed."""
  from unittest import mock

  (binding,) = [b for b in shipped.BINDINGS if b.distribution == "mpi4jax"]
  return mock.patch.object(shipped, "installed", lambda: ((binding, "0.9.1"),))


if __name__ == "__main__":
  absltest.main()
