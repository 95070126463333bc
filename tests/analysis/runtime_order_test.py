"""The ordering analysis against the runtime: no claimed order is violated.

Random programs of example-resource reads and writes, with random entangles,
are compiled and run; the resource's call log records the order in which
the calls actually ran. Whenever ``happens_before`` claims ``a`` before
``b``, ``a`` must have finished before ``b`` started, in every run.
"""

import jax
import jax.numpy as jnp
from absl.testing import absltest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from entangle_jax import entangle, testing
from entangle_jax.demo import _hazard
from entangle_jax.demo._hazard import Ordering

RUNS = 10
DELAY_SIZE = 50_000  # big buffers: XLA:CPU then runs thunks concurrently


@st.composite
def programs(draw):
  """A list of (kind, slot, witnesses, delayed) ops."""
  count = draw(st.integers(2, 6))
  ops = []
  for k in range(count):
    kind = draw(st.sampled_from(["read", "write"]))
    slot = draw(st.integers(0, 2))
    witnesses = draw(st.sets(st.integers(0, k - 1), max_size=2)) if k else set()
    delayed = draw(st.booleans())
    ops.append((kind, slot, sorted(witnesses), delayed))
  return ops


def build(ops):
  """The program. Op k touches k + 1 copies of its slot: its name in the log."""

  def program(base, delay_input):
    delay = (jnp.sum(jnp.sin(delay_input)) * 0).astype(jnp.int32)
    results = []
    for k, (kind, slot, witnesses, delayed) in enumerate(ops):
      ids = jnp.full((k + 1,), slot, jnp.int32) + base
      if delayed:
        ids = ids + delay
      if witnesses:
        ids = entangle(ids, *[results[w] for w in witnesses])
      with jax.named_scope(f"op{k}"):
        if kind == "write":
          out = testing.write_slot(ids, jnp.full((k + 1,), float(k)))
        else:
          out = testing.read_slot(ids)
      results.append(out)
    return results

  return program


def run_logs(compiled, args, runs):
  logs = []
  for _ in range(runs):
    testing.reset_slots()
    jax.block_until_ready(compiled(*args))
    logs.append({len(r.slots) - 1: r for r in testing.call_log()})
  return logs


def claimed_orders(compiled, count):
  analysis = testing.OrderAnalysis(compiled)
  ops = [analysis.select_ops(f"op{k}") for k in range(count)]
  return [
    (a, b)
    for a in range(count)
    for b in range(count)
    if a != b and all(analysis.precedes(x, y) for x in ops[a] for y in ops[b])
  ]


class RuntimeCrossCheckTest(absltest.TestCase):
  @settings(max_examples=12, deadline=None, database=None)
  @given(ops=programs())
  def test_claimed_order_is_the_order_that_ran(self, ops):
    args = (jnp.int32(0), jnp.ones(DELAY_SIZE, jnp.float32))
    compiled = jax.jit(build(ops)).lower(*args).compile()
    claims = claimed_orders(compiled, len(ops))
    note(f"claims: {claims}")
    for log in run_logs(compiled, args, RUNS):
      self.assertCountEqual(log, range(len(ops)))  # every op ran once
      for a, b in claims:
        self.assertLess(
          log[a].end, log[b].start, f"op{a} was claimed before op{b}"
        )

  def test_entangled_ops_are_claimed(self):
    # The property above must not hold vacuously: entangle's edges count.
    ops = [
      ("write", 0, [], False),
      ("read", 0, [0], True),
      ("write", 0, [1], False),
    ]
    args = (jnp.int32(0), jnp.ones(DELAY_SIZE, jnp.float32))
    compiled = jax.jit(build(ops)).lower(*args).compile()
    self.assertCountEqual(claimed_orders(compiled, 3), [(0, 1), (1, 2), (0, 2)])
    for log in run_logs(compiled, args, RUNS):
      self.assertLess(log[0].end, log[1].start)
      self.assertLess(log[1].end, log[2].start)

  def test_log_catches_the_unordered_hazard(self):
    # Control: without entangle the analysis claims nothing, and the log
    # shows the runtime really running the second write before the read.
    hazard = jax.jit(_hazard.program(Ordering.NONE))
    args = _hazard.arguments()
    compiled = hazard.lower(*args).compile()
    self.assertFalse(testing.happens_before(compiled, "read", "second_write"))
    # Usually the first run shows it; stop at the first reversal.
    for _ in range(500):
      testing.reset_slots()
      jax.block_until_ready(compiled(*args))
      first, *rest = testing.call_log()
      self.assertEqual(first.kind, "write")
      if [r.kind for r in rest] == ["write", "read"]:
        break
    else:
      self.fail("the second write never ran before the read in 500 runs")


# Witnesses for the second write's slot, as functions of the read's result.
WITNESSES = {
  "the read's result": lambda x: x,
  "an unrelated constant": lambda x: jnp.zeros((1,), jnp.float32),
  "a zero-size slice of the read's result": lambda x: x[None][:0],
  "an empty array entangled with the read's result": (
    lambda x: entangle(jnp.zeros((0,), jnp.float32), x)
  ),
}


def witnessed_hazard(witness):
  """The demo's hazard; the second write's token is entangled with
  `witness`."""
  return _hazard.program(Ordering.ENTANGLE, witness=WITNESSES[witness])


class ZeroSizeWitnessTest(absltest.TestCase):
  """A witness with no elements orders nothing, at run time too."""

  def compile(self, witness):
    return _hazard.compile_hazard(witnessed_hazard(witness))

  def test_zero_size_witnesses_order_nothing(self):
    ordered = self.compile("the read's result")
    self.assertTrue(testing.happens_before(ordered, "read", "second_write"))
    self.assertIsNone(_hazard.runs_until_wrong_of(ordered, 100))
    # Control: a witness that does not depend on the read shows the hazard.
    unrelated = self.compile("an unrelated constant")
    self.assertFalse(testing.happens_before(unrelated, "read", "second_write"))
    if _hazard.runs_until_wrong_of(unrelated, 300) is None:
      self.skipTest("this XLA happened to run every read first, unordered")
    for witness in list(WITNESSES)[2:]:
      compiled = self.compile(witness)
      analysis = testing.OrderAnalysis(compiled)
      self.assertFalse(analysis.happens_before("read", "second_write"), witness)
      self.assertLen(analysis.empty_witness_entangles(), 1, witness)
      self.assertIsNotNone(_hazard.runs_until_wrong_of(compiled, 300), witness)


if __name__ == "__main__":
  absltest.main()
