"""The order analysis against what XLA:CPU really did, on random programs.

A claimed order that does not exist is the analysis' worst failure: a user
who trusts it ships the bug. Two judges (tests/oracle/oracle_checks.py) look for
one: the call log of many runs with concurrency forced (wide programs of
sleeping calls, tests/oracle/oracle_programs.py), and the execution graphs
XLA:CPU logs when it builds its executors. The programs have while loops,
conditionals, tuples and host callbacks.

The controls: analyses made wrong on purpose (`MUTANTS`) must be refuted by
both judges on the same programs and runs; else a pass would mean nothing.
"""

import contextlib
import json
import os
import tempfile
import unittest.mock

from absl import logging
from absl.testing import absltest

from entangle_jax import testing
from tests import preloaded_child, test_util
from tests.oracle import oracle_checks, oracle_programs

SEEDS = range(6)
"""The programs, by seed: the same ones on every run of the test. Together
they have every one of `FEATURES`."""
FEATURES = {
  "loop",
  "loop in loop",
  "loop in branch",
  "branch",
  "branch in loop",
  "read in loop condition",
  "loop predicate uses an earlier value",
  "loop predicate uses the body's value",
  "loop predicate is a bare state element",
  "branch predicate uses an earlier value",
  "callback in control flow",
}
RUNS = 16
"""Runs of each program; XLA's thread pool decides what overlaps."""
MUTANT_PROGRAMS = 3
"""How many of the programs the wrong analyses (`MUTANTS`) are judged on."""
WORKER = os.path.join(os.path.dirname(__file__), "oracle_worker.py")
WORKER_TIMEOUT_S = 600


class Observed:
  """One program as the worker compiled and ran it."""

  def __init__(self, seed: int, result: dict, log: str):
    self.program = oracle_programs.generate(seed)
    self.module = result["module"]
    self.runs = [
      [oracle_checks.Event(*event) for event in run] for run in result["runs"]
    ]
    begin, end = f"oracle: begin {seed}\n", f"oracle: end {seed}\n"
    log = log[log.index(begin) + len(begin) : log.index(end)]
    self.graphs = None
    """The logged execution graphs; None if this XLA logs none."""
    if oracle_checks.executor_graphs(log):
      self.graphs = oracle_checks.ExecutionGraphs(self.module, log)

  def claims(self, mutant=None) -> oracle_checks.Claims:
    """The analysis' claims, or a wrong analysis' (`MUTANTS`)."""
    with mutant(self.module) if mutant else contextlib.nullcontext():
      analysis = testing.OrderAnalysis(self.module)
      return oracle_checks.claims(analysis, self.program)

  def runtime_refutations(self, claims) -> list[str]:
    return oracle_checks.runtime_refutations(self.program, claims, self.runs)

  def graph_refutations(self, claims) -> list[str]:
    if self.graphs is None:
      return []
    return oracle_checks.graph_refutations(self.program, claims, self.graphs)


def observe(seeds, runs: int) -> list[Observed]:
  """Compiles and runs the programs in a child with XLA's graph log on."""
  env = dict(
    test_util.child_env(),
    JAX_PLATFORMS="cpu",  # the call log is the host store's
    TF_CPP_MIN_LOG_LEVEL="0",
    TF_CPP_VMODULE="thunk_executor=6",
  )
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "observed.json")
    done = preloaded_child.run(
      [WORKER, out, str(runs), *map(str, seeds)],
      env=env,
      timeout=WORKER_TIMEOUT_S,
    )
    if done.returncode != 0:
      raise AssertionError(
        f"the oracle's worker failed:\n{done.stderr[-5000:]}"
      )
    with open(out) as f:
      results = json.load(f)
  return [Observed(seed, results[str(seed)], done.stderr) for seed in seeds]


def _patched_precedes(extra):
  """`OrderAnalysis.precedes` that also claims what `extra(a, b)` says."""
  real = testing.OrderAnalysis.precedes

  def precedes(self, a, b):
    return real(self, a, b) or extra(a, b)

  return unittest.mock.patch.object(testing.OrderAnalysis, "precedes", precedes)


def schedule_order_mutant(module_text: str):
  """Takes the schedule for the order things run in: `a` also precedes `b`
  when it comes first in their computation."""

  def position(op):
    return module_text.index(f"%{op.name} = ")

  return _patched_precedes(
    lambda a, b: a.computation == b.computation and position(a) < position(b)
  )


def control_flow_mutant(module_text: str):
  """Takes the schedule for the order of whole loops and conditionals: a
  call inside one precedes whatever comes after it in the entry."""
  calls = oracle_checks.CallTree(module_text)

  def outermost(op):
    (path, *_) = calls.paths(op.name)
    return path[0][1], len(path) > 1

  def position(name):
    return module_text.index(f"%{name} = ")

  def extra(a, b):
    (top_a, nested_a), (top_b, nested_b) = outermost(a), outermost(b)
    return (
      (nested_a or nested_b)
      and top_a != top_b
      and position(top_a) < position(top_b)
    )

  return _patched_precedes(extra)


def silent_races_mutant(module_text: str):
  """Reports no race at all."""
  del module_text
  return unittest.mock.patch.object(
    testing.OrderAnalysis, "races", lambda self, among=None: []
  )


MUTANTS = {
  "schedule order": schedule_order_mutant,
  "loops and conditionals in schedule order": control_flow_mutant,
  "no races": silent_races_mutant,
}


class OrderOracleTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.observed = observe(SEEDS, RUNS)

  def test_the_programs_have_control_flow_and_run_concurrently(self):
    features = set().union(*(o.program.features() for o in self.observed))
    self.assertEqual(features, FEATURES)
    for observed in self.observed:
      with self.subTest(seed=observed.program.seed):
        for opcode in (" while(", " conditional(", " tuple("):
          self.assertIn(opcode, observed.module)
        self.assertIn("callback", observed.module)
        # Every call ran (a call in a branch where the branch was taken).
        ran = {e.tag for run in observed.runs for e in run}
        self.assertEqual(ran, set(observed.program.tags))
    # Concurrency really was forced: calls overlapped in time.
    runs = [run for o in self.observed for run in o.runs]
    overlapping = sum(map(oracle_checks.overlapping, runs))
    logging.info("calls overlapped in %d of %d runs", overlapping, len(runs))
    self.assertGreater(overlapping, len(runs) // 4)

  def test_claims_hold_at_run_time_and_in_the_graph(self):
    for observed in self.observed:
      claims = observed.claims()
      with self.subTest(seed=observed.program.seed):
        logging.info(
          "program %d: %d calls, %d ordered pairs, %d pairs not racing",
          observed.program.seed,
          len(observed.program.tags),
          len(claims.ordered),
          len(claims.not_racing),
        )
        self.assertNotEmpty(claims.ordered)  # else nothing is tested
        self.assertEmpty(claims.disagreements, observed.program.describe())
        refuted = observed.runtime_refutations(claims)
        self.assertEmpty(refuted[:10], observed.program.describe())
        refuted = observed.graph_refutations(claims)
        self.assertEmpty(refuted[:10], observed.program.describe())
    if all(o.graphs is None for o in self.observed):
      self.skipTest("run time checked; this XLA logs no execution graph")

  def test_wrong_analyses_are_caught(self):
    judged = self.observed[:MUTANT_PROGRAMS]
    for name, mutant in MUTANTS.items():
      at_run_time = in_graph = 0
      for observed in judged:
        claims = observed.claims(mutant)
        at_run_time += len(observed.runtime_refutations(claims))
        in_graph += len(observed.graph_refutations(claims))
      logging.info(
        "%s: %d refutations at run time, %d in the graph",
        name,
        at_run_time,
        in_graph,
      )
      with self.subTest(mutant=name):
        self.assertGreater(at_run_time, 0)
        if all(o.graphs is not None for o in judged):
          self.assertGreater(in_graph, 0)


if __name__ == "__main__":
  absltest.main()
