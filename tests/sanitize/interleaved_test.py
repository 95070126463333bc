"""Another thread's write that lands between two calls of one execution
is reported "interleaved" in every racy round (issue 78, defect 4, a
regression against 0.5.0 reported as 0 to 3 of 6).

Thread A runs write(1.0), then a ``pure_callback`` (which touches nothing)
that waits, then a read of the same slot; thread B's program writes 2.0.
In the racy shape B runs while A's callback waits, so B's write lands in
A's gap, whatever the threads' timing, with no call overlapping another:
A reads 2.0 (the run-time control) and each round must be reported. In
the control B runs after A's execution ended: A reads 1.0, and nothing is
reported. Also the free-running shape of the issue (both threads write
then read, with XLA work between): every round whose read returned the
other thread's value is reported.

In a fresh interpreter, where the example store registers after the
sanitizer started.
"""

import json
import textwrap

from absl.testing import absltest

from tests import test_util

ROUNDS = 6

PROGRAM = textwrap.dedent(
  """
  import json, sys, threading
  import jax
  import jax.numpy as jnp
  import numpy as np
  from entangle_jax import entangle, testing

  with testing.sanitize():
    from entangle_jax.testing import example_store as store

  ROUNDS = int(sys.argv[1])
  in_gap, b_done = threading.Event(), threading.Event()

  def gap(t):
    in_gap.set()
    b_done.wait(10)
    return np.int32(0)

  def a_prog(v):
    t = store.write_slot(jnp.int32(5), v)
    g = jax.pure_callback(gap, jax.ShapeDtypeStruct((), jnp.int32), t)
    return store.read_slot(entangle(t, g))

  def b_prog(v):
    return store.write_slot(jnp.int32(5), v)

  def summary(seen, wrong):
    return {
      "wrong": wrong,
      "kinds": [r.kind for r in seen.races],
      "threads": sorted(
        {len({r.first.thread, r.second.thread}) for r in seen.races}
      ),
      "report": seen.report(file=sys.stderr),
    }

  out = {}
  for mode in ("gap", "after"):
    with testing.sanitize() as seen:
      a, b = jax.jit(a_prog), jax.jit(b_prog)
      reads = []
      for _ in range(ROUNDS):
        in_gap.clear()
        b_done.clear()
        def other():
          if mode == "gap":
            in_gap.wait(10)
          jax.block_until_ready(b(jnp.float32(2.0)))
          b_done.set()
        thread = threading.Thread(target=other)
        if mode == "gap":
          thread.start()
        else:
          b_done.set()  # A's callback goes on; B runs after A.
        reads.append(float(a(jnp.float32(1.0))))
        if mode == "after":
          thread.start()
        thread.join()
    out[mode] = summary(seen, sum(r != 1.0 for r in reads))

  def free(v, big):
    t = store.write_slot(jnp.int32(6), v)
    work = (jnp.sum(jnp.sin(big)) * 0.0).astype(jnp.int32)
    return store.read_slot(entangle(t, work))

  big = jnp.ones(1 << 20, jnp.float32)
  with testing.sanitize() as seen:
    g = jax.jit(free)
    got = {}
    def run(k):
      got[k] = [float(g(jnp.float32(k + 1), big)) for _ in range(ROUNDS)]
    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  out["free"] = summary(
    seen, sum(x != k + 1 for k in got for x in got[k])
  )
  print(json.dumps(out))
  """
)


class InterleavedTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    run = test_util.run_python(PROGRAM, str(ROUNDS), timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def test_a_write_in_the_gap_is_reported_in_every_round(self):
    gap = self.out["gap"]
    # The control: every round's read saw the other thread's write.
    self.assertEqual(gap["wrong"], ROUNDS, gap["report"])
    self.assertEqual(gap["kinds"], ["interleaved"] * ROUNDS, gap["report"])
    self.assertEqual(gap["threads"], [2], gap["report"])

  def test_the_write_after_the_execution_gives_no_race(self):
    after = self.out["after"]
    self.assertEqual(after["wrong"], 0, after["report"])
    self.assertEqual(after["kinds"], [], after["report"])

  def test_free_running_threads_every_wrong_read_is_reported(self):
    free = self.out["free"]
    interleaved = free["kinds"].count("interleaved")
    self.assertGreaterEqual(interleaved, free["wrong"], free["report"])


if __name__ == "__main__":
  absltest.main()
