"""The cross-rank check's point-to-point calls (skeptic pass 77c):
receives from any source run in several executions, tags, what a plain
send into a sendrecv carries, and swapped sends and receives of one type.

Hermetic, in one process, as across_ranks_test.py: each rank's modules
are compiled here with the rank as a Python value, with that file's FFI
targets declared as a send, a receive and an allreduce, and a sendrecv
of this file's declared as mpi4jax's is (each registered with entangle's
no-op handler, only to compile).
"""

import functools
import io
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from entangle_jax import entangle
from entangle_jax._src import native
from entangle_jax._src.targets import table
from entangle_jax._src.targets.declaration import Declarations, merged
from entangle_jax.testing import CrossRankResult, races_across
from entangle_jax.testing._analysis import rank_sequences
from entangle_jax.testing._analysis.ranks import (
  BeyondTheModel,
  Loop,
  RankProgram,
)
from entangle_jax.testing._ways_in import command
from tests.ways_in import across_ranks_test as base
from tests.ways_in.across_ranks_test import allreduce, recv, send

X = jax.ShapeDtypeStruct((4,), jnp.float32)
DATA = pathlib.Path(__file__).resolve().parent / "data"
LOOPS = DATA / "ranks_mpi4jax_loops"
SENDRECV = "ranks_p2p_test_sendrecv"
# The same kinds on a declared communicator (its handle `COMM`): their
# peers are ranks of it.
ON_COMM = {
  kind: f"ranks_p2p_test_{kind}_on_comm"
  for kind in ("send", "recv", "sendrecv")
}
COMM = 7


@functools.cache
def registered() -> None:
  """Registers this file's targets with entangle's no-op handler."""
  handler = native.load().registrations()["entangle"]
  for target in (SENDRECV, *ON_COMM.values()):
    jax.ffi.register_ffi_target(target, handler, platform="cpu")


def declarations() -> Declarations:
  """across_ranks_test.py's targets, and a sendrecv declared as
  mpi4jax's is, its communicator left out (each rank's is the world)."""
  mine = table.from_table(
    {
      "targets": {
        SENDRECV: {
          "communicates": {
            "kind": "sendrecv",
            "peer": "dest",
            "tag": "sendtag",
            "source": "source",
            "source_tag": "recvtag",
          }
        }
      }
    },
    "across_ranks_p2p_test",
  )
  on_comm = table.from_table(
    {
      "targets": {
        ON_COMM["send"]: {
          "communicates": {
            "kind": "send",
            "peer": "dest",
            "communicator": "comm",
          }
        },
        ON_COMM["recv"]: {
          "communicates": {
            "kind": "recv",
            "peer": "source",
            "communicator": "comm",
          }
        },
        ON_COMM["sendrecv"]: {
          "communicates": {
            "kind": "sendrecv",
            "peer": "dest",
            "source": "source",
            "communicator": "comm",
          }
        },
      }
    },
    "across_ranks_p2p_test",
  )
  return merged([mine, on_comm, base.declarations()], distinct=False)


def on_comm(kind, x, **peers):
  """A `kind` call (send, recv or sendrecv) on communicator `COMM`, with
  `peers` (dest, source) ranks of it; returns what it receives (a
  send: an i32 placeholder)."""
  registered()
  result = jax.ShapeDtypeStruct(
    x.shape if kind != "send" else (), x.dtype if kind != "send" else jnp.int32
  )
  call = jax.ffi.ffi_call(ON_COMM[kind], result, has_side_effect=True)
  numbers = {k: np.int64(v) for k, v in peers.items()}
  return call(x, comm=np.int64(COMM), **numbers)


def sendrecv(x, dest, source, received=None, sendtag=0, recvtag=-1):
  """Sends `x` to `dest`, and receives from `source` an array of
  `received`'s shape and type (`x`'s by default), as mpi4jax's
  sendrecv (whose receive takes any tag unless told)."""
  registered()
  received = received or jax.ShapeDtypeStruct(x.shape, x.dtype)
  call = jax.ffi.ffi_call(SENDRECV, received, has_side_effect=True)
  return call(
    x,
    dest=np.int64(dest),
    source=np.int64(source),
    sendtag=np.int64(sendtag),
    recvtag=np.int64(recvtag),
  )


def check(function, ranks=2) -> CrossRankResult:
  """`function(rank, x)` compiled once per rank, checked across ranks
  (as across_ranks_test.py's `check`, with this file's declarations)."""
  modules = [
    jax.jit(functools.partial(function, rank)).lower(X).compile()
    for rank in range(ranks)
  ]
  return base.across(modules, declarations())


def program(function) -> RankProgram:
  """`function`'s module, compiled for an f32[4], read for the check."""
  text = jax.jit(function).lower(X).compile().as_text()
  assert text is not None
  return RankProgram(text, declarations())


def executions(*ranks) -> CrossRankResult:
  """The cross-rank check of each rank's executions: per rank, the
  functions it runs, in order, each one jitted execution (one function
  run twice is one module executed twice, as a Python loop runs it)."""
  cache: dict[object, tuple[str, RankProgram]] = {}

  def named(function):
    if function not in cache:
      cache[function] = (f"jit_{function.__name__}", program(function))
    return cache[function]

  return rank_sequences.check_executions(
    [[named(f) for f in runs] for runs in ranks]
  )


def receive_any(x):
  return recv(x, (4,), source=-1)


def receive_from_1(x):
  return recv(x, (4,), source=1)


def send_to_0(x):
  return send(x, dest=0)


def send_twice_to_0(x):
  # One value twice, in one execution: the two sends need no telling
  # apart (`origins`).
  return send(entangle(x, send(x, dest=0)), dest=0)


class WildcardExecutionsTest(absltest.TestCase):
  """Skeptic pass 77c, N3 and F1: a receive from any source was known by
  its rank and instruction name, but each execution of a jitted helper
  runs the same instruction, and the receive of every module of one
  binding has one name. Two executions shared one sender: a
  master/worker loop over a jitted ``recv(ANY_SOURCE)`` was a deadlock,
  and a matching that hangs was set aside as though its wildcard
  receive had met no send."""

  def test_one_name_in_two_modules(self):
    # What the cases below rest on: the two modules' receives share a
    # name.
    names = {
      call.op.name
      for function in (receive_any, receive_from_1)
      for call in program(function).calls()
    }
    self.assertLen(names, 1)

  def test_a_helper_called_once_per_worker_is_proved(self):
    result = executions([receive_any, receive_any], [send_to_0], [send_to_0])
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)

  def test_control_a_call_too_many_deadlocks(self):
    result = executions(
      [receive_any, receive_any, receive_any], [send_to_0], [send_to_0]
    )
    self.assertEqual(result.verdict, "deadlock", result.text())

  def test_a_fixed_receive_after_two_from_any_rank_may_hang(self):
    # Rank 2 sends twice, rank 1 once: when the two receives from any
    # rank meet rank 1, then rank 2, rank 0's receive from rank 1 waits
    # for ever.
    result = executions(
      [receive_any, receive_any, receive_from_1],
      [send_to_0],
      [send_to_0, send_to_0],
    )
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    self.assertIn("execution 1) meets rank 1", result.deadlock.matching)
    self.assertIn("execution 2) meets rank 2", result.deadlock.matching)
    blocked = result.deadlock.blocked[0]
    assert blocked is not None
    self.assertIn("from rank 1", blocked.label)

  def test_control_three_receives_from_any_rank_are_proved(self):
    result = executions(
      [receive_any, receive_any, receive_any],
      [send_to_0],
      [send_twice_to_0],
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 3)

  def test_a_fixed_receive_in_another_module_may_hang(self):
    # When the receive from any rank meets rank 1, the receive from rank
    # 1 (another module, the same instruction name) waits for ever.
    result = executions([receive_any, receive_from_1], [send_to_0], [send_to_0])
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    self.assertIn("meets rank 1's send", result.deadlock.matching)

  def test_control_the_fixed_receive_first_is_proved(self):
    # Rank 1's send is taken first: the receive from any rank can only
    # meet rank 2's.
    result = executions([receive_from_1, receive_any], [send_to_0], [send_to_0])
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)


class TagTest(absltest.TestCase):
  """Skeptic pass 77c, N9: a tag below 0 was taken as ``ANY_TAG``. Only a
  receive's ``ANY_TAG`` (-1) is a wildcard; MPI rejects another negative
  tag (``MPI_ERR_TAG``: send and receive of tag -5 both aborted, and the
  check proved them)."""

  @staticmethod
  def program(rank, x, sent, wanted):
    if rank == 0:
      return send(x, dest=1, tag=sent)
    return recv(x, (4,), source=0, tag=wanted)

  def test_a_negative_tag_is_rejected(self):
    for sent, wanted in ((-5, -5), (3, -5), (-1, -1), (-5, 3)):
      with self.subTest(sent=sent, wanted=wanted):
        result = check(
          functools.partial(self.program, sent=sent, wanted=wanted)
        )
        self.assertEqual(result.verdict, "mismatch", result.text())
        assert result.mismatch is not None
        self.assertIn("MPI_ERR_TAG", result.mismatch.differs)
        self.assertIn("below 0", result.mismatch.differs)
        self.assertEqual(result.status, 1)

  def test_control_a_tag_or_any_tag_is_proved(self):
    for sent, wanted in ((5, 5), (5, -1), (0, -1)):
      with self.subTest(sent=sent, wanted=wanted):
        result = check(
          functools.partial(self.program, sent=sent, wanted=wanted)
        )
        self.assertEqual(result.verdict, "proved", result.text())

  def test_a_sendrecv_with_a_negative_tag_is_rejected(self):
    def program(rank, x, recvtag):
      return sendrecv(x, dest=1 - rank, source=1 - rank, recvtag=recvtag)

    result = check(functools.partial(program, recvtag=-7))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("tag -7", result.mismatch.differs)
    # Control: mpi4jax's default, ANY_TAG.
    result = check(functools.partial(program, recvtag=-1))
    self.assertEqual(result.verdict, "proved", result.text())


class PeerTest(absltest.TestCase):
  """A peer below 0 that is neither ``ANY_SOURCE`` nor ``PROC_NULL`` (of
  the declared binding, with no communicator: Open MPI's -1 and -2) was
  taken as a wildcard, as N9's tags were: MPI rejects it
  (``MPI_ERR_RANK``)."""

  @staticmethod
  def program(rank, x, dest, source):
    if rank == 0:
      return send(x, dest=dest)
    return recv(x, (4,), source=source)

  def test_a_negative_peer_is_rejected(self):
    for dest, source in ((1, -5), (-1, 0)):
      with self.subTest(dest=dest, source=source):
        result = check(
          functools.partial(self.program, dest=dest, source=source)
        )
        self.assertEqual(result.verdict, "mismatch", result.text())
        assert result.mismatch is not None
        self.assertIn("MPI_ERR_RANK", result.mismatch.differs)

  def test_control_a_rank_or_any_source_is_proved(self):
    for source in (0, -1):
      with self.subTest(source=source):
        result = check(functools.partial(self.program, dest=1, source=source))
        self.assertEqual(result.verdict, "proved", result.text())


class PlainSendIntoSendrecvTest(absltest.TestCase):
  """Skeptic pass 77c, N2: three ranks, rank 0's sendrecv sends to rank
  1 (a plain receive) and receives from rank 2 (a plain send). Only the
  sendrecv's outgoing message was compared: rank 2's i32[4] read as
  f32[4] (wrong values), or an f32[8] (``MPI_ERR_TRUNCATE``), was
  proved."""

  @staticmethod
  def program(rank, x, sent):
    if rank == 0:
      return sendrecv(x, dest=1, source=2)
    if rank == 1:
      return recv(x, (4,), source=0)
    return send(sent(x), dest=0)

  def test_another_type_is_a_mismatch(self):
    result = check(
      functools.partial(self.program, sent=lambda x: x.astype(jnp.int32)),
      3,
    )
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("rank 2 sends s32[4]", result.mismatch.differs)
    self.assertIn("rank 0 receives it into f32[4]", result.mismatch.differs)

  def test_a_longer_message_is_a_mismatch(self):
    result = check(
      functools.partial(self.program, sent=lambda x: jnp.tile(x, 2)), 3
    )
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("rank 2 sends f32[8]", result.mismatch.differs)

  def test_control_the_same_count_and_type_is_proved(self):
    # MPI matches counts, not shapes: f32[2,2] meets f32[4].
    result = check(
      functools.partial(self.program, sent=lambda x: x.reshape(2, 2)), 3
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)


class PointToPointSwapTest(absltest.TestCase):
  """Skeptic pass 77c, N1: two point-to-point steps of one type between
  the same ranks, swapped on one rank, give each rank the other's data
  (MPI matches count, type and tag): origins told only collectives
  apart, and all three shapes here were proved."""

  @staticmethod
  def exchange(rank, x, swap):
    """Both ranks exchange ``a``, then ``b``; rank 1 in the other order
    with `swap`."""
    other = 1 - rank
    a, b = x + 1.0, x * 10.0
    if swap and rank == 1:
      a, b = b, a
    first = sendrecv(a, dest=other, source=other)
    return first, sendrecv(entangle(b, first), dest=other, source=other)

  def test_swapped_sendrecvs_are_a_mismatch(self):
    result = check(functools.partial(self.exchange, swap=True))
    self.assertEqual(result.verdict, "mismatch", result.text())
    assert result.mismatch is not None
    self.assertIn("the two calls are swapped", result.mismatch.differs)
    self.assertIn("rank 1's call 1", result.mismatch.differs)
    self.assertEqual([c.rank for c in result.mismatch.calls if c], [0, 1])

  def test_control_one_order_is_proved(self):
    result = check(functools.partial(self.exchange, swap=False))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)

  def test_a_jitted_exchange_called_twice_is_matched_by_type_only(self):
    # A halo-exchange helper: each execution sends its own argument, and
    # nothing says which a rank passed first.
    def to_1(x):
      return sendrecv(x, dest=1, source=1)

    def to_0(x):
      return sendrecv(x, dest=0, source=0)

    result = executions([to_1, to_1], [to_0, to_0])
    self.assertEqual(result.verdict, "matched-by-type", result.text())
    (said,) = result.by_type_only
    self.assertIn("rank 0's calls 1 and 2", said)
    self.assertIn("in another execution", said)
    self.assertEqual(result.status, 2)

  @staticmethod
  def two_sends(rank, x, second=lambda x: x * 10.0, tags=(0, 0), wanted=-1):
    """Rank 0 sends ``x + 1``, then `second`, with `tags`; rank 1
    receives twice, with tag `wanted`, then the second tag (or
    ``ANY_TAG``)."""
    if rank == 0:
      done = send(x + 1.0, dest=1, tag=tags[0])
      return send(entangle(second(x), done), dest=1, tag=tags[1])
    got = recv(x, (4,), source=0, tag=wanted)
    second_tag = tags[1] if wanted >= 0 else -1
    return got, recv(got, (4,), source=0, tag=second_tag)

  def test_two_sends_of_one_type_are_matched_by_type_only(self):
    # Rank 0 could send them the other way round: the receiver takes
    # either alike, and no other rank's operands say which is which.
    for tags in ((0, 0), (1, 2)):  # A receive of ANY_TAG takes either.
      with self.subTest(tags=tags):
        result = check(functools.partial(self.two_sends, tags=tags))
        self.assertEqual(result.verdict, "matched-by-type", result.text())
        (said,) = result.by_type_only
        self.assertIn("rank 0's calls 1 and 2", said)
        self.assertIn("send", said)

  def test_control_one_value_twice_or_told_by_tags_is_proved(self):
    result = check(functools.partial(self.two_sends, second=lambda x: x + 1.0))
    self.assertEqual(result.verdict, "proved", result.text())
    # Receives of tag 1, then 2: a swap of the sends would deadlock.
    result = check(functools.partial(self.two_sends, tags=(1, 2), wanted=1))
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 2)


class LoopWildcardTest(absltest.TestCase):
  """Issue 77: a receive from any source inside one module's loop got one
  sender for every iteration. A master whose ``fori_loop`` receives twice
  from any rank, each worker sending once, was a deadlock (each matching
  forced both iterations to one worker); and with a receive from rank 1
  after the loop, rank 2 sending twice, it was proved, though it hangs
  when the loop meets rank 1, then rank 2 (mpirun, README.md of
  data/ranks_mpi4jax_loops). Each iteration's receive now meets its own
  sender, as the same receives written out in a Python loop do."""

  @staticmethod
  def master(rank, x, trips=2, after=None, sends=(1, 1), unrolled=False):
    """Rank 0 receives from any rank `trips` times (in a ``fori_loop``,
    or written out with `unrolled`), then from `after`; rank k sends
    ``sends[k - 1]`` times."""
    if rank == 0:

      def body(_, acc):
        return acc + recv(acc, (4,), source=-1)

      if unrolled:
        for _ in range(trips):
          x = body(0, x)
      else:
        x = jax.lax.fori_loop(0, trips, body, x)
      return x if after is None else recv(x, (4,), source=after)
    done = send(x, dest=0)
    for _ in range(sends[rank - 1] - 1):
      done = send(entangle(x, done), dest=0)
    return done

  def test_the_loop_stays_a_loop(self):
    # What the cases rest on: XLA keeps the loop, its trips known.
    (loop,) = program(functools.partial(self.master, 0)).items
    assert isinstance(loop, Loop)
    self.assertEqual(loop.trips, 2)

  def test_a_master_looping_over_its_workers_is_proved(self):
    for unrolled in (False, True):
      with self.subTest(unrolled=unrolled):
        result = check(functools.partial(self.master, unrolled=unrolled), 3)
        self.assertEqual(result.verdict, "proved", result.text())
        self.assertLen(result.matched, 2)

  def test_control_one_trip_too_many_deadlocks(self):
    for unrolled in (False, True):
      with self.subTest(unrolled=unrolled):
        result = check(
          functools.partial(self.master, trips=3, unrolled=unrolled), 3
        )
        self.assertEqual(result.verdict, "deadlock", result.text())

  def test_a_fixed_receive_after_the_loop_may_hang(self):
    for unrolled in (False, True):
      with self.subTest(unrolled=unrolled):
        result = check(
          functools.partial(
            self.master, after=1, sends=(1, 2), unrolled=unrolled
          ),
          3,
        )
        self.assertEqual(result.verdict, "deadlock", result.text())
        assert result.deadlock is not None
        self.assertIn("meets rank 1's send", result.deadlock.matching)
        self.assertIn("meets rank 2's send", result.deadlock.matching)
        if not unrolled:  # One receive, in each iteration.
          self.assertIn("iteration 2) meets", result.deadlock.matching)
        blocked = result.deadlock.blocked[0]
        assert blocked is not None
        self.assertIn("from rank 1", blocked.label)

  def test_control_any_rank_after_the_loop_is_proved(self):
    for unrolled in (False, True):
      with self.subTest(unrolled=unrolled):
        result = check(
          functools.partial(
            self.master, after=-1, sends=(1, 2), unrolled=unrolled
          ),
          3,
        )
        self.assertEqual(result.verdict, "proved", result.text())
        self.assertLen(result.matched, 3)

  @staticmethod
  def lockstep(rank, x, after=False):
    """Every rank loops twice: rank 0 receives from any rank twice an
    iteration, ranks 1 and 2 send once; with `after`, rank 0 then
    receives from rank 2, which sends once more."""

    def body(_, acc):
      if rank == 0:
        acc = acc + recv(acc, (4,), source=-1)
        return acc + recv(acc, (4,), source=-1)
      return acc + send(acc, dest=0).astype(jnp.float32)

    x = jax.lax.fori_loop(0, 2, body, x)
    if after and rank == 0:
      return recv(x, (4,), source=2)
    if after and rank == 2:
      return send(x, dest=0)
    return x

  def test_a_sender_running_ahead_of_the_loop_may_hang(self):
    # Rank 0's first iteration meets rank 2 twice (its second iteration
    # ran ahead), its second rank 1 and rank 2's last send: rank 1's
    # second send and the receive from rank 2 wait for ever. One
    # iteration against another, as one step, never shows it.
    result = check(functools.partial(self.lockstep, after=True), 3)
    self.assertEqual(result.verdict, "deadlock", result.text())

  def test_control_the_loops_alone_are_proved(self):
    result = check(self.lockstep, 3)
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 4)

  @staticmethod
  def reduced_trips(rank, x, collective=False):
    """Every rank loops as many times as an allreduced value says (XLA
    does not know the trips): rank 0 receives from any rank twice an
    iteration, ranks 1 and 2 send once; with `collective`, every rank
    also allreduces each iteration."""
    trips = allreduce(x)[0].astype(jnp.int32)

    def body(_, acc):
      if collective:
        acc = allreduce(acc)
      if rank == 0:
        acc = acc + recv(acc, (4,), source=-1)
        return acc + recv(acc, (4,), source=-1)
      return acc + send(acc, dest=0).astype(jnp.float32)

    return jax.lax.fori_loop(0, trips, body, x)

  def test_unknown_trips_without_a_collective_cannot_be_answered(self):
    # A sender may run ahead into its next iteration, and nothing says
    # how far: the check says it cannot answer (exit 2), not "proved".
    with self.assertRaisesRegex(
      BeyondTheModel, "ran ahead into its next iteration"
    ):
      check(self.reduced_trips, 3)

  def test_control_a_collective_each_iteration_is_proved(self):
    result = check(functools.partial(self.reduced_trips, collective=True), 3)
    self.assertEqual(result.verdict, "proved", result.text())


class LayoutTranslationTest(absltest.TestCase):
  """Issue 77: on a communicator that spans every rank in another order
  (``COMM_WORLD.Split(0, size - 1 - rank)``: its rank k is world rank
  ``1 - k``), peers are ranks of it. They were not proved at all
  ("unseen-communicators"); they are now translated to world ranks
  through the recorded layout, and checked."""

  REVERSED = ({COMM: (1, 0)}, {COMM: (1, 0)})
  WORLD = ({COMM: (0, 1)}, {COMM: (0, 1)})

  def check(self, program, layouts) -> CrossRankResult:
    modules = [
      jax.jit(functools.partial(program, rank)).lower(X).compile()
      for rank in range(2)
    ]
    return races_across(
      modules, declarations=declarations(), communicators=list(layouts)
    )

  @staticmethod
  def handoff(rank, x, numbering):
    """World rank 0 sends to world rank 1, which receives: `numbering`
    gives the peer as a rank of the communicator."""
    if rank == 0:
      return on_comm("send", x, dest=numbering(1))
    return on_comm("recv", x, source=numbering(0))

  def test_peers_numbered_as_the_communicator_does_are_proved(self):
    result = self.check(
      functools.partial(self.handoff, numbering=lambda world: 1 - world),
      self.REVERSED,
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)
    # Reported as world ranks.
    self.assertIn("send ranks_p2p_test_send_on_comm to rank 1", result.text())

  def test_control_peers_numbered_as_the_world_does_deadlock(self):
    # "To rank 1" from world rank 0 is to itself, and world rank 1's
    # "from rank 0" is from itself: each waits for ever.
    world = functools.partial(self.handoff, numbering=lambda world: world)
    result = self.check(world, self.REVERSED)
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    blocked = result.deadlock.blocked[0]
    assert blocked is not None
    self.assertIn("to rank 0", blocked.label)
    # On a communicator numbered as the world, the same program is right.
    result = self.check(world, self.WORLD)
    self.assertEqual(result.verdict, "proved", result.text())

  @staticmethod
  def exchange(rank, x, other):
    """A sendrecv with `other(rank)`, as a rank of the communicator."""
    peer = other(rank)
    return on_comm("sendrecv", x, dest=peer, source=peer)

  def test_a_sendrecv_with_the_other_rank_of_the_communicator_is_proved(self):
    # The other process's rank of the reversed communicator: 1 - (1 -
    # rank), the rank itself in the world's numbers.
    result = self.check(
      functools.partial(self.exchange, other=lambda rank: rank), self.REVERSED
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 1)

  def test_control_the_other_world_rank_is_a_message_to_itself(self):
    # 1 - rank on the reversed communicator: each rank's own data back
    # (mpirun_test's LayoutTest). MPI runs it; the check does not prove
    # it, since it is how a world-numbered peer goes wrong.
    result = self.check(
      functools.partial(self.exchange, other=lambda rank: 1 - rank),
      self.REVERSED,
    )
    self.assertEqual(result.verdict, "unseen-communicators", result.text())
    self.assertIn("a message to itself", result.text())
    result = self.check(
      functools.partial(self.exchange, other=lambda rank: 1 - rank), self.WORLD
    )
    self.assertEqual(result.verdict, "proved", result.text())


class GroupsTest(absltest.TestCase):
  """Issue 77: ranks split into groups, each on a communicator of its
  own (``COMM_WORLD.Split(rank % 2, rank)`` of 4 ranks: world ranks 0
  and 2 one, 1 and 3 another). Checked as one set of ranks, groups that
  make different calls were compared with each other; each group is now
  checked alone."""

  EVEN_ODD = ({COMM: (0, 2)}, {COMM: (1, 3)}, {COMM: (0, 2)}, {COMM: (1, 3)})

  def check(self, program, layouts=None) -> CrossRankResult:
    modules = [
      jax.jit(functools.partial(program, rank)).lower(X).compile()
      for rank in range(4)
    ]
    return races_across(
      modules,
      declarations=declarations(),
      communicators=list(layouts or self.EVEN_ODD),
    )

  @staticmethod
  def handoffs(rank, x, odd_sends=1, odd_receives=1):
    """In each group its rank 0 sends to its rank 1, which receives; the
    odd group's ranks `odd_sends` and `odd_receives` times."""
    mine, odd = rank // 2, rank % 2
    times = (odd_sends if mine == 0 else odd_receives) if odd else 1
    out = x
    for _ in range(times):
      if mine == 0:
        out = on_comm("send", entangle(x, out), dest=1)
      else:
        out = on_comm("recv", out, source=0)
    return out

  def test_groups_that_make_different_calls_are_proved(self):
    # The odd group hands off twice, the even group once.
    result = self.check(
      functools.partial(self.handoffs, odd_sends=2, odd_receives=2)
    )
    self.assertEqual(result.verdict, "proved", result.text())
    self.assertLen(result.matched, 3)
    ranks = {c.rank for step in result.matched for c in step.calls}
    self.assertEqual(ranks, {0, 1, 2, 3})

  def test_control_a_group_one_receive_short_deadlocks(self):
    result = self.check(functools.partial(self.handoffs, odd_sends=2))
    self.assertEqual(result.verdict, "deadlock", result.text())
    assert result.deadlock is not None
    blocked = [c for c in result.deadlock.blocked if c is not None]
    self.assertEqual([c.rank for c in blocked], [1])  # World rank 1.
    self.assertIn("send", blocked[0].label)

  def test_control_one_communicator_of_every_rank_compares_them_all(self):
    # The same modules as one group of 4: rank 0's send to "rank 1" is
    # to world rank 1, which sends too.
    result = self.check(
      functools.partial(self.handoffs, odd_sends=2, odd_receives=2),
      [{COMM: (0, 1, 2, 3)}] * 4,
    )
    self.assertNotEqual(result.verdict, "proved", result.text())

  def test_the_stored_mpi4jax_groups_are_proved(self):
    # mpirun -n 4 (data/ranks_mpi4jax_groups/README.md): right.
    folders = [
      str(DATA / "ranks_mpi4jax_groups" / "groups_ok" / f"rank{rank}")
      for rank in range(4)
    ]
    out, err = io.StringIO(), io.StringIO()
    with base.shipped_mpi4jax():
      status = command.main(["--ranks", *folders], out=out, err=err)
    said = out.getvalue() + err.getvalue()
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 4 ranks make 3 communicating calls", said)
    self.assertIn("world ranks [1, 3]", said)

  def test_groups_that_disagree_on_their_members_are_not_proved(self):
    # World rank 2's layout says the group is (2, 0): not the one rank 0
    # holds, so nothing is split.
    layouts = list(self.EVEN_ODD)
    layouts[2] = {COMM: (2, 0)}
    result = self.check(self.handoffs, layouts)
    self.assertNotEqual(result.verdict, "proved", result.text())


class StoredLoopShapesTest(absltest.TestCase):
  """LoopWildcardTest's shapes as mpi4jax programs run under ``mpirun -n
  3`` (data/ranks_mpi4jax_loops/README.md): each rank's dumps and its
  execution record, through ``--ranks``."""

  def ranks(self, shape: str) -> tuple[int, str]:
    folders = [str(LOOPS / shape / f"rank{rank}") for rank in range(3)]
    out, err = io.StringIO(), io.StringIO()
    with base.shipped_mpi4jax():
      status = command.main(["--ranks", *folders], out=out, err=err)
    return status, out.getvalue() + err.getvalue()

  def test_the_right_master_loop_is_proved(self):
    status, said = self.ranks("loop_any_ok")
    self.assertEqual(status, 0, said)
    self.assertIn("Proved: the 3 ranks make 2 communicating calls", said)

  def test_the_master_loop_that_may_hang_is_a_deadlock(self):
    # This run was right (rank 1 was late); runs where rank 2 was late
    # hung in the receive from rank 1.
    status, said = self.ranks("loop_any_then_fixed")
    self.assertEqual(status, 1, said)
    self.assertIn("Deadlock", said)
    self.assertIn("meets rank 1's send", said)

  def test_control_one_trip_too_many_is_a_deadlock(self):
    status, said = self.ranks("loop_any_three")
    self.assertEqual(status, 1, said)
    self.assertIn("Deadlock", said)


if __name__ == "__main__":
  absltest.main()
