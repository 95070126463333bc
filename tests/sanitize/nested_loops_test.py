"""Calls in nested loops are compared iteration by iteration (issue 78,
defect 1): a read in an inner loop and a write after that loop in the
outer loop's body, which nothing orders after the reads, so XLA:CPU runs
the write first. Each read's value is the run-time control (the stamp):
the program makes it after the previous outer iteration's write and
before this one's, so it must return the outer iteration's index; a read
that returned more ran after the write. Every such read must be reported
"out of order" with the write, and no other (recall and precision 1.0),
and no call left "not compared"; the same program with the write ordered
after the reads (``entangle``) reads right and reports nothing.

Shapes: two and three levels of ``fori_loop``, a ``scan`` in a
``fori_loop``, a ``while_loop`` in a ``scan``, and a loop in a ``cond``
in a loop (the reads run in even outer iterations only).

In a fresh interpreter, where the example store registers after the
sanitizer started.
"""

import json
import textwrap

from absl.testing import absltest

from tests import test_util

# Each shape twice: the fresh interpreter and its compiles are most of the
# time (Bazel gives a test 60 s on a loaded machine).
RUNS = 2

PROGRAMS = textwrap.dedent(
  """
  import itertools, json, sys
  import jax
  import jax.numpy as jnp
  from entangle_jax import entangle, testing

  RUNS = int(sys.argv[1])
  if sys.argv[2] == "no-markers":
    # As on a TPU, where no iteration marker can run: the loops' constant
    # trip counts pair the calls.
    from entangle_jax.testing._sanitize import sites
    sites._Walker.mark_iterations = lambda self, op, construct: None
  ONLY = sys.argv[3:]

  with testing.sanitize():
    from entangle_jax.testing import example_store as store
  N, M, K = 4, 3, 2
  f32 = jnp.float32

  def late(slots, big, i):
    # The slots, once a computation that takes a while is done (of the
    # iteration: XLA cannot hoist it): the reads wait for it, and the
    # write, which does not, runs first.
    slow = jnp.sum(jnp.sin(big * i.astype(f32))) * 0.0
    return slots + slow.astype(jnp.int32)

  def write(slots, i, reads, fixed):
    # After the reads in program order; `fixed` makes it so at run time.
    slot = entangle(slots[0], reads) if fixed else slots[0]
    store.write_slot(slot, i.astype(f32) + 1.0)

  def two_levels(slots, big, fixed):
    def outer(i, reads):
      read_at = late(slots, big, i)
      def inner(j, reads):
        return reads.at[i, j].set(store.read_slot(read_at[j]))
      reads = jax.lax.fori_loop(0, M, inner, reads)
      write(slots, i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.zeros((N, M)))

  def three_levels(slots, big, fixed):
    def outer(i, reads):
      read_at = late(slots, big, i)
      def middle(j, reads):
        def inner(k, reads):
          return reads.at[i, j, k].set(store.read_slot(read_at[j + k]))
        return jax.lax.fori_loop(0, K, inner, reads)
      reads = jax.lax.fori_loop(0, M, middle, reads)
      write(slots, i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.zeros((N, M, K)))

  def scan_in_fori(slots, big, fixed):
    def outer(i, reads):
      read_at = late(slots, big, i)
      def step(c, slot):
        return c, store.read_slot(slot)
      _, row = jax.lax.scan(step, 0, read_at[:M])
      reads = reads.at[i].set(row)
      write(slots, i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.zeros((N, M)))

  def while_in_scan(slots, big, fixed):
    def step(i, _):
      read_at = late(slots, big, i)
      def cond(c):
        return c[0] < M
      def body(c):
        j, row = c
        return j + 1, row.at[j].set(store.read_slot(read_at[j]))
      _, row = jax.lax.while_loop(cond, body, (0, jnp.zeros(M)))
      write(slots, i, row, fixed)
      return i + 1, row
    return jax.lax.scan(step, 0, None, length=N)[1]

  def loop_in_cond(slots, big, fixed):
    def outer(i, reads):
      read_at = late(slots, big, i)
      def some(reads):
        def inner(j, reads):
          return reads.at[i, j].set(store.read_slot(read_at[j]))
        return jax.lax.fori_loop(0, M, inner, reads)
      reads = jax.lax.cond(i % 2 == 0, some, lambda r: r, reads)
      write(slots, i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.full((N, M), -1.0))

  SHAPES = {
    "two_levels": (two_levels, (N, M)),
    "three_levels": (three_levels, (N, M, K)),
    "scan_in_fori": (scan_in_fori, (N, M)),
    "while_in_scan": (while_in_scan, (N, M)),
    "loop_in_cond": (loop_in_cond, (N, M)),
  }

  slots = jnp.full((M + K,), 7, jnp.int32)
  big = jnp.ones(1 << 18, jnp.float32)
  out = {}
  for name, (f, shape) in SHAPES.items():
    if ONLY and name not in ONLY:
      continue
    for fixed in (False, True):
      runs = []
      for _ in range(RUNS):
        store.reset_slots()
        with testing.sanitize() as seen:
          g = jax.jit(lambda s, b: f(s, b, fixed))
          reads = jax.device_get(g(slots, big)).reshape(shape)
        # The reads that ran (-1.0: the cond skipped them), in program
        # order, which is their order of start (a loop's iterations run
        # one after the other).
        ran = [
          ix for ix in itertools.product(*map(range, shape))
          if reads[ix] != -1.0
        ]
        calls = sorted(
          (c for c in seen.calls if c.target.endswith("read_slot")),
          key=lambda c: c.start_ns,
        )
        assert len(calls) == len(ran), (len(calls), len(ran))
        where = {id(c): ix for c, ix in zip(calls, ran)}
        runs.append({
          "wrong": sorted(
            list(ix) for ix in ran if reads[ix] != ix[0]
          ),
          "reported": sorted(
            list(where[id(c)])
            for r in seen.races
            for c in (r.first, r.second)
            if id(c) in where
          ),
          "kinds": sorted({r.kind for r in seen.races}),
          "races": len(seen.races),
          "unpaired": sum(u.calls for u in seen.unpaired),
          "why": sorted({u.why for u in seen.unpaired}),
          "unknown_runs": seen.unknown_runs,
          "report": seen.report(file=sys.stderr),
        })
      out[f"{name} fixed={fixed}"] = runs
  print(json.dumps(out))
  """
)

SHAPES = (
  "two_levels",
  "three_levels",
  "scan_in_fori",
  "while_in_scan",
  "loop_in_cond",
)


def assert_each_wrong_read_reported(test, runs, name):
  """Each run of `name` reported exactly the reads that came out wrong,
  each paired, and (the control) some run had a wrong read."""
  test.assertTrue(any(run["wrong"] for run in runs), name)
  for run in runs:
    test.assertEqual(run["reported"], run["wrong"], run["report"])
    test.assertEqual(run["races"], len(run["wrong"]), run["report"])
    test.assertEqual(run["unpaired"], 0, run["report"])


class NestedLoopsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    run = test_util.run_python(PROGRAMS, str(RUNS), "markers", timeout=500)
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def test_every_wrong_read_is_reported_and_no_other(self):
    for name in SHAPES:
      with self.subTest(name):
        wrong_somewhere = False
        for run in self.out[f"{name} fixed=False"]:
          wrong_somewhere |= bool(run["wrong"])
          # Recall and precision 1.0 against the stamps: each wrong read
          # is one race (with its iteration's write), and nothing else.
          self.assertEqual(run["reported"], run["wrong"], run["report"])
          self.assertEqual(run["races"], len(run["wrong"]), run["report"])
          if run["wrong"]:
            self.assertEqual(run["kinds"], ["out of order"], run["report"])
          self.assertEqual(run["unpaired"], 0, run["report"])
          self.assertEqual(run["unknown_runs"], 0, run["report"])
        # The control: the race happened in some run, else this shows
        # nothing.
        self.assertTrue(wrong_somewhere, name)

  def test_the_write_ordered_after_the_reads_gives_no_race(self):
    for name in SHAPES:
      with self.subTest(name):
        for run in self.out[f"{name} fixed=True"]:
          # The control: every read returned its iteration's value.
          self.assertEqual(run["wrong"], [], run["report"])
          self.assertEqual(run["races"], 0, run["report"])
          self.assertEqual(run["unpaired"], 0, run["report"])
          self.assertIn("0 races", run["report"])
          self.assertNotIn("not compared", run["report"])


class WithoutMarkersTest(absltest.TestCase):
  """The same programs with no iteration marker, as a module on a TPU (or
  over several devices) has none: each inner loop's trip count, a constant
  of the program, pairs the calls (`checks.by_count`); a loop in a branch
  stays not compared, saying why."""

  COUNTED = ("three_levels", "while_in_scan")

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    shapes = (*cls.COUNTED, "loop_in_cond")
    run = test_util.run_python(
      PROGRAMS, str(RUNS), "no-markers", *shapes, timeout=500
    )
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def test_constant_trip_counts_pair_every_wrong_read(self):
    for name in self.COUNTED:
      with self.subTest(name):
        assert_each_wrong_read_reported(
          self, self.out[f"{name} fixed=False"], name
        )
        for fixed in self.out[f"{name} fixed=True"]:
          self.assertEqual((fixed["races"], fixed["unpaired"]), (0, 0))

  def test_a_loop_in_a_branch_is_not_compared_and_says_why(self):
    for run in self.out["loop_in_cond fixed=False"]:
      self.assertEqual(run["races"], 0, run["report"])
      self.assertGreater(run["unpaired"], 0, run["report"])
      self.assertTrue(any("not recorded" in w for w in run["why"]), run["why"])


CALLBACK_PROGRAMS = textwrap.dedent(
  """
  import itertools, json, sys
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.experimental import io_callback
  from entangle_jax import entangle, testing

  RUNS = int(sys.argv[1])
  N, M, K = 4, 3, 2
  f32 = jnp.float32
  F32 = jax.ShapeDtypeStruct((), f32)
  state = {"v": 0.0}

  def get(x):
    return np.float32(state["v"])

  def put(v):
    state["v"] = float(v)
    return np.float32(0)

  def slow(big, i):
    # Of the iteration (XLA cannot hoist it): the gets' operands wait for
    # it, and the put, whose operand does not, runs first.
    return jnp.sum(jnp.sin(big * i.astype(f32))) * 0.0

  def put_after(i, reads, fixed):
    # After the gets in program order; `fixed` applies the static
    # report's fix (the put's operand consumes the gets' results).
    v = (i + 1).astype(f32)
    io_callback(put, F32, entangle(v, reads) if fixed else v)

  def fori_in_fori(big, fixed):
    def outer(i, reads):
      def inner(j, reads):
        return reads.at[i, j].set(io_callback(get, F32, j + slow(big, i)))
      reads = jax.lax.fori_loop(0, M, inner, reads)
      put_after(i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.full((N, M), -1.0))

  def while_in_scan_in_fori_put_in_cond(big, fixed):
    def outer(i, reads):
      def step(c, j):
        def body(st):
          k, row = st
          got = io_callback(get, F32, k + j + slow(big, i))
          return k + 1, row.at[k].set(got)
        return c, jax.lax.while_loop(
          lambda st: st[0] < K, body, (0, jnp.zeros(K))
        )[1]
      reads = reads.at[i].set(jax.lax.scan(step, 0, jnp.arange(M))[1])
      def with_put(reads):
        put_after(i, reads, fixed)
        return reads
      return jax.lax.cond(i % 2 == 0, with_put, lambda r: r, reads)
    return jax.lax.fori_loop(0, N, outer, jnp.full((N, M, K), -1.0))

  def trip_count_of_the_iteration(big, fixed):
    def outer(i, reads):
      def body(st):
        j, reads = st
        got = io_callback(get, F32, j + slow(big, i))
        return j + 1, reads.at[i, j].set(got)
      reads = jax.lax.while_loop(
        lambda st: st[0] < i + 1, body, (0, reads)
      )[1]
      put_after(i, reads, fixed)
      return reads
    return jax.lax.fori_loop(0, N, outer, jnp.full((N, N), -1.0))

  def last_put(i):
    # The value the gets of outer iteration i must see in program order.
    return float(i)

  def last_put_even(i):
    # Puts run in even iterations only: the last one before iteration i.
    return 0.0 if i == 0 else float((i - 1) // 2 * 2 + 1)

  SHAPES = {
    "fori_in_fori": (fori_in_fori, (N, M), last_put),
    "while_in_scan_in_fori_put_in_cond": (
      while_in_scan_in_fori_put_in_cond, (N, M, K), last_put_even
    ),
    "trip_count_of_the_iteration": (
      trip_count_of_the_iteration, (N, N), last_put
    ),
  }

  big = jnp.ones(1 << 18, f32)
  out = {}
  for name, (f, shape, expected) in SHAPES.items():
    for fixed in (False, True):
      runs = []
      for _ in range(RUNS):
        state["v"] = 0.0
        with testing.sanitize() as seen:
          g = jax.jit(lambda b: f(b, fixed))
          reads = np.asarray(jax.device_get(g(big))).reshape(shape)
        # The gets that ran (-1.0: never run), in program order, which is
        # their order of start (a loop's iterations run one after another).
        ran = [
          ix for ix in itertools.product(*map(range, shape))
          if reads[ix] != -1.0
        ]
        gets = sorted(
          (c for c in seen.calls if c.function and "get" in c.function),
          key=lambda c: c.start_ns,
        )
        assert len(gets) == len(ran), (name, len(gets), len(ran))
        where = {id(c): ix for c, ix in zip(gets, ran)}
        runs.append({
          # The stamps: a get that saw a later iteration's put raced.
          "wrong": sorted(
            list(ix) for ix in ran if reads[ix] != expected(ix[0])
          ),
          "reported": sorted(
            list(where[id(c)])
            for r in seen.races
            for c in (r.first, r.second)
            if id(c) in where
          ),
          "races": len(seen.races),
          "unpaired": sum(u.calls for u in seen.unpaired),
          "report": seen.report(file=sys.stderr),
        })
      out[f"{name} fixed={fixed}"] = runs
  print(json.dumps(out))
  """
)


class CallbackNestedLoopsTest(absltest.TestCase):
  """Host callbacks in nested loops (skeptic pass r78h): ``io_callback``
  gets in an inner loop and a put after it in the outer loop's body (in a
  ``cond`` in one shape, and an inner trip count that grows with the outer
  iteration in another), which nothing orders after the gets. Each get's
  value is its stamp: in program order it sees the put of the outer
  iterations before its own. Every get that saw a later put is reported,
  and no other; with the static report's fix applied (the put's operand
  consumes the gets' results) every get reads right and nothing is
  reported."""

  SHAPES = (
    "fori_in_fori",
    "while_in_scan_in_fori_put_in_cond",
    "trip_count_of_the_iteration",
  )

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    run = test_util.run_python(CALLBACK_PROGRAMS, str(RUNS), timeout=500)
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def test_every_get_that_saw_a_later_put_is_reported_and_no_other(self):
    for name in self.SHAPES:
      with self.subTest(name):
        assert_each_wrong_read_reported(
          self, self.out[f"{name} fixed=False"], name
        )

  def test_the_fix_applied_gives_right_reads_and_no_race(self):
    for name in self.SHAPES:
      with self.subTest(name):
        for run in self.out[f"{name} fixed=True"]:
          self.assertEqual(run["wrong"], [], run["report"])
          self.assertEqual(run["races"], 0, run["report"])
          self.assertEqual(run["unpaired"], 0, run["report"])


if __name__ == "__main__":
  absltest.main()
