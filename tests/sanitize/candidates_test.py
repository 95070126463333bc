"""Which calls the sanitizer's checks see (`candidates`, on numpy
columns), each case beside its control, and the calls made only when
read (`columns`), on a real program in a fresh interpreter."""

import json
import textwrap

import numpy as np
from absl.testing import absltest

from entangle_jax.testing._sanitize import callbacks, candidates
from tests import test_util


def _needed(start, end, serial, site, run_id, touches=None, repeated=None):
  n = len(start)
  return candidates.needed(
    np.array(start, np.int64),
    np.array(end, np.int64),
    np.array(serial, np.int64),
    np.array(site, np.int64),
    np.array(run_id, np.int64),
    np.ones(n, bool) if touches is None else np.array(touches, bool),
    np.zeros(n, bool) if repeated is None else np.array(repeated, bool),
  )[0].tolist()


class OverlappingTest(absltest.TestCase):
  def test_a_cluster_of_calls_at_one_time(self):
    # 0-10 and 5-12 overlap; 20-30 is alone.
    got = candidates.overlapping(np.array([0, 5, 20]), np.array([10, 12, 30]))
    self.assertEqual(got.tolist(), [True, True, False])
    # Control: a call that begins as another ends does not overlap it.
    got = candidates.overlapping(np.array([0, 10, 20]), np.array([10, 20, 30]))
    self.assertEqual(got.tolist(), [False, False, False])

  def test_a_long_call_holds_its_cluster_open(self):
    got = candidates.overlapping(
      np.array([0, 1, 50, 200]), np.array([100, 2, 60, 300])
    )
    self.assertEqual(got.tolist(), [True, True, True, False])


class NeededTest(absltest.TestCase):
  def test_one_place_in_one_execution_needs_no_call(self):
    n = 1000
    start = list(range(0, 2 * n, 2))
    end = [s + 1 for s in start]
    self.assertEqual(_needed(start, end, [0] * n, [4] * n, [9] * n), [])
    # Control: a second place in that execution: its order is checked.
    sites = [4] * (n - 1) + [5]
    got = _needed(start, end, [0] * n, sites, [9] * n)
    self.assertEqual(got, list(range(n)))

  def test_executions_one_after_the_other_need_no_call(self):
    start, end = [0, 2, 10, 12], [1, 3, 11, 13]
    self.assertEqual(_needed(start, end, [0] * 4, [4] * 4, [1, 1, 2, 2]), [])
    # Control: another execution's call lands between two of the first's.
    start, end = [0, 2, 4, 6], [1, 3, 5, 7]
    got = _needed(start, end, [0] * 4, [4] * 4, [1, 2, 1, 2])
    self.assertEqual(got, [0, 1, 2, 3])

  def test_calls_of_no_execution_or_no_object_are_left_out(self):
    start, end = [0, 2, 4, 6], [1, 3, 5, 7]
    unknown = callbacks.UNKNOWN_RUN
    got = _needed(start, end, [0, -1, 0, 0], [4, 5, 6, 4], [1, 1, unknown, 2])
    self.assertEqual(got, [])
    # Control: the same calls placed in one execution, two places.
    got = _needed(start, end, [0] * 4, [4, 5, 6, 4], [1] * 4)
    self.assertEqual(got, [0, 1, 2, 3])
    # A call that touches nothing is never needed, overlapping or not.
    got = _needed([0, 1], [5, 6], [0, 0], [4, 5], [1, 1], touches=[1, 0])
    self.assertEqual(got, [])

  def test_a_repeated_handle_is_needed(self):
    start, end = [0, 2], [1, 3]
    got = _needed(start, end, [0, 0], [4, 4], [1, 1], repeated=[0, 1])
    self.assertEqual(got, [1])


def _plain(site, position, context, start, execution=None):
  n = len(site)
  e = np.zeros(n, np.int64) if execution is None else np.array(execution)
  site = np.array(site, np.int64)
  places = [len(set(site[e == k].tolist())) for k in range(int(e.max()) + 1)]
  return candidates.plainly_in_order(
    e,
    np.array(places, np.int64),
    site,
    np.array(position, np.int64),
    np.array(context, np.int64),
    np.array(start, np.int64),
  ).tolist()


class PlainlyInOrderTest(absltest.TestCase):
  """An execution the order check may skip: rounds of its places in
  program order. Each case beside a control one change away."""

  def test_rounds_of_places_in_program_order(self):
    # A write (place 0) and a read (place 1) a step, three steps.
    self.assertEqual(_plain([0, 1] * 3, [0, 1] * 3, [0] * 6, range(6)), [True])

  def test_a_read_before_its_write_is_checked(self):
    # Control: the same calls with step 2's read first.
    got = _plain([0, 1, 1, 0, 0, 1], [0, 1, 1, 0, 0, 1], [0] * 6, range(6))
    self.assertEqual(got, [False])

  def test_a_place_that_ran_fewer_times_is_checked(self):
    # A read XLA hoisted: it ran once, before three writes.
    got = _plain([1, 0, 0, 0], [1, 0, 0, 0], [0] * 4, range(4))
    self.assertEqual(got, [False])
    got = _plain([0, 1, 0, 0], [0, 1, 0, 0], [0] * 4, range(4))
    self.assertEqual(got, [False])

  def test_places_in_two_contexts_are_checked(self):
    # A write outside the loop, a read in it.
    got = _plain([0, 1, 1], [0, 1, 1], [0, 1, 1], range(3))
    self.assertEqual(got, [False])

  def test_two_calls_that_start_at_once_are_checked(self):
    self.assertEqual(_plain([0, 1], [0, 1], [0, 0], [5, 5]), [False])
    self.assertEqual(_plain([0, 1], [0, 1], [0, 0], [5, 6]), [True])

  def test_each_execution_on_its_own(self):
    got = _plain(
      [0, 1, 0, 1, 1, 0], [0, 1, 0, 1, 1, 0], [0] * 6, range(6),
      execution=[0, 0, 0, 0, 1, 1],
    )  # fmt: skip
    self.assertEqual(got, [True, False])


LAZY = textwrap.dedent(
  """
  import json
  import jax
  import jax.numpy as jnp
  from entangle_jax import testing

  with testing.sanitize():
    from entangle_jax.testing import example_store as store

  def loop(t):
    return jax.lax.fori_loop(0, 20000, lambda i, t: store.write_slot(t, 1.0), t)

  def hazard(slot):
    token = store.write_slot(slot, 1.0)
    x = store.read_slot(token, delay_us=300)
    store.write_slot(token, 2.0)
    return x

  f = jax.jit(loop)
  with testing.sanitize() as quiet:
    jax.block_until_ready(f(3))
    jax.block_until_ready(f(3))
  made = quiet.calls._columns.made()
  n = len(quiet.calls)
  every = list(quiet.calls)
  g = jax.jit(lambda: jnp.stack([hazard(s) for s in range(8)]))
  with testing.sanitize() as racy:
    for _ in range(5):
      jax.block_until_ready(g())
  ids = {id(c) for c in racy.calls}
  print(json.dumps({
    "calls": n,
    "made": made,
    "made_after": quiet.calls._columns.made(),
    "same": every[0] is quiet.calls[0] and every[-1] is quiet.calls[-1],
    "races": len(racy.races),
    "named": all(id(r.first) in ids and id(r.second) in ids
                 for r in racy.races),
  }))
  """
)


class LazyCallsTest(absltest.TestCase):
  def test_calls_are_made_when_read_and_races_name_them(self):
    run = test_util.run_python(LAZY, timeout=300)
    self.assertEqual(run.returncode, 0, run.stderr[-4000:])
    out = json.loads(run.stdout.strip().splitlines()[-1])
    self.assertEqual(out["calls"], 40000)
    # Two executions one after the other, of one place each: only one
    # call of each kind (what it touches is asked of it) was made.
    self.assertLess(out["made"], 10)
    self.assertEqual(out["made_after"], 40000)
    self.assertTrue(out["same"])
    # Control: the racy program's races name the calls of `calls`.
    self.assertGreater(out["races"], 0)
    self.assertTrue(out["named"])


if __name__ == "__main__":
  absltest.main()
