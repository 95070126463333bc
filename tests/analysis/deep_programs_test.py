"""``races`` answers on programs that nest deeply or carry a lot (issue 66):
a loop over a 200-branch ``lax.switch`` with native calls in every branch
(which once raised RecursionError), a loop whose state is 2,000 leaves,
and 42 loops, scans and conds nested in each other; and, written out as
HLO text so that no XLA version changes it, a loop over a 1000-branch
conditional and a handle built per device through 3,000 links.

Each shape is checked racy and ordered: the racy variant's pairs are
exactly the ones it was built with (so the check cannot pass by finding
nothing), the ordered control has none. The programs are those of
``python -m benchmarks.deep_programs``, which measures the analysis time;
here it is printed, never asserted (machines are noisy).
"""

import sys
import time

from absl.testing import absltest

from benchmarks import deep_programs
from entangle_jax import testing
from entangle_jax.testing import Declarations, TargetDeclaration
from tests.hand_written_hlo import hlo_module
from tests.test_util import READ, WRITE


def timed_races(shape: str, racy: bool) -> testing.Races:
  """``races`` of the compiled `shape`, compared with its module before
  optimization, as a ``Lowered`` gets it; prints how long the analysis
  took."""
  program, before = deep_programs.compiled(shape, racy)
  start = time.perf_counter()
  found = testing.OrderAnalysis(program, before_optimization=before).races()
  seconds = time.perf_counter() - start
  variant = "racy" if racy else "ordered"
  print(
    f"deep_programs_test: {shape} {variant}: races() took {seconds:.3f} s",
    file=sys.stderr,
  )
  return found


def switch_in_loop(branches: int, racy: bool) -> str:
  """The module of a loop of 3 steps around a `branches`-way conditional,
  as XLA:CPU compiles ``lax.switch`` in ``fori_loop``, written out so that
  no XLA version changes it: branch k writes the token in the loop state
  with the value the step before read, the step then reads the write's
  token. Racy: the step also reads the token it began with."""
  computations = {}
  written = f'custom_call_target="{WRITE}", custom_call_has_side_effect=true'
  for k in range(branches):
    computations[f"branch_{k}"] = f"""
  %given{k} = (s32[], f32[]) parameter(0)
  %token{k} = s32[] get-tuple-element(%given{k}), index=0
  %value{k} = f32[] get-tuple-element(%given{k}), index=1
  %write{k} = s32[] custom-call(%token{k}, %value{k}), {written}
  ROOT %out{k} = (s32[]) tuple(%write{k})"""
  operands = ", ".join(["%passed"] * branches)
  called = ", ".join(f"%branch_{k}" for k in range(branches))
  conditional = (
    f"conditional(%step, {operands}), branch_computations={{{called}}}"
  )
  stray = (
    f'%stray = f32[] custom-call(%token), custom_call_target="{READ}"'
    if racy
    else "%stray = f32[] constant(0)"
  )
  computations["body"] = f"""
  %state = (s32[], s32[], f32[]) parameter(0)
  %step = s32[] get-tuple-element(%state), index=0
  %token = s32[] get-tuple-element(%state), index=1
  %seen = f32[] get-tuple-element(%state), index=2
  %passed = (s32[], f32[]) tuple(%token, %seen)
  %taken = (s32[]) {conditional}
  %written = s32[] get-tuple-element(%taken), index=0
  %read = f32[] custom-call(%written), custom_call_target="{READ}"
  {stray}
  %sum = f32[] add(%seen, %read)
  %seen2 = f32[] add(%sum, %stray)
  %one = s32[] constant(1)
  %step2 = s32[] add(%step, %one)
  ROOT %next = (s32[], s32[], f32[]) tuple(%step2, %written, %seen2)"""
  computations["more"] = """
  %asked = (s32[], s32[], f32[]) parameter(0)
  %at = s32[] get-tuple-element(%asked), index=0
  %three = s32[] constant(3)
  ROOT %below = pred[] compare(%at, %three), direction=LT"""
  looped = "condition=%more, body=%body"
  entry = f"""
  %slot = s32[] parameter(0)
  %zero = s32[] constant(0)
  %nothing = f32[] constant(0)
  %start = (s32[], s32[], f32[]) tuple(%zero, %slot, %nothing)
  ROOT %loop = (s32[], s32[], f32[]) while(%start), {looped}"""
  return hlo_module(entry, **computations)


SHARED = "tp_set"  # A target declared to touch one object for all devices.


def offset_through_a_chain(links: int, device_number: str) -> str:
  """An SPMD module of 8 partitions that writes handle ``h`` plus
  `device_number`, passed through `links` additions of zero: a handle
  built to differ on each device (``partition-id``) or not
  (``replica-id``, one replica)."""
  chain = ["%s0 = s32[] add(%h, %number)"] + [
    f"%s{k} = s32[] add(%s{k - 1}, %zero)" for k in range(1, links + 1)
  ]
  entry = "\n".join(
    [
      "%h = s32[] parameter(0)",
      f"%id = u32[] {device_number}",
      "%number = s32[] convert(%id)",
      "%zero = s32[] constant(0)",
      *chain,
      f"%write = s32[] custom-call(%s{links}), "
      f'custom_call_target="{SHARED}", custom_call_has_side_effect=true',
    ]
  )
  return hlo_module(entry).replace(
    "HloModule rules, is_scheduled=true",
    "HloModule rules, is_scheduled=true, num_partitions=8",
  )


def reads_and_writes(found: testing.Races) -> tuple[set, set]:
  """The reads and the writes in `found`, each race one of each."""
  reads, writes = set(), set()
  for race in found:
    by_target = {race.first.target: race.first, race.second.target: race.second}
    assert set(by_target) == {READ, WRITE}, race
    reads.add(by_target[READ])
    writes.add(by_target[WRITE])
  return reads, writes


class DeepProgramsTest(absltest.TestCase):
  def test_a_loop_over_a_200_branch_switch(self):
    # Each step's stray read of the token it began with races with the
    # write of every branch (whichever runs); the ordered reads and the
    # reads inside the even branches race with nothing.
    found = timed_races("switch", racy=True)
    reads, writes = reads_and_writes(found)
    self.assertLen(found, deep_programs.BRANCHES)
    self.assertLen(reads, 1)
    self.assertLen(writes, deep_programs.BRANCHES)
    self.assertLen({w.computation for w in writes}, deep_programs.BRANCHES)

  def test_control_a_loop_over_an_ordered_switch(self):
    self.assertEqual(timed_races("switch", racy=False), [])

  def test_a_loop_over_a_1000_branch_conditional_written_out(self):
    # The same shape as XLA prints it, five times the branches: each once
    # took a few more frames of Python's stack.
    found = testing.races(switch_in_loop(1000, racy=True))
    reads, writes = reads_and_writes(found)
    self.assertEqual({r.name for r in reads}, {"stray"})
    self.assertEqual(
      {w.name for w in writes}, {f"write{k}" for k in range(1000)}
    )

  def test_control_a_loop_over_an_ordered_conditional_written_out(self):
    self.assertEqual(testing.races(switch_in_loop(1000, racy=False)), [])

  def test_a_per_device_handle_through_3000_links(self):
    # Whether a handle differs on each device is followed back through
    # every link to the device's number: none of the pairs across devices
    # that a handle alike on all of them would have.
    shared = Declarations(
      targets=(TargetDeclaration(SHARED, "write", 0, devices="shared"),)
    )
    apart = offset_through_a_chain(3000, "partition-id()")
    self.assertEqual(
      testing.OrderAnalysis(apart, declarations=shared).races(), []
    )
    # Control: replica-id is the same on every partition.
    alike = offset_through_a_chain(3000, "replica-id()")
    (race,) = testing.OrderAnalysis(alike, declarations=shared).races()
    self.assertTrue(race.across_devices)

  def test_a_loop_carrying_2000_leaves(self):
    # Each slot's read and write of one step, and no pair across slots
    # (constant slot ids 0 to 19: distinct objects), however far in the
    # state its token lies.
    found = timed_races("carry", racy=True)
    reads, writes = reads_and_writes(found)
    self.assertLen(found, deep_programs.TOKENS)
    self.assertLen(reads, deep_programs.TOKENS)
    self.assertLen(writes, deep_programs.TOKENS)
    slots = set()
    for race in found:
      (first,), (second,) = race.first.accesses, race.second.accesses
      assert first.object is not None and second.object is not None
      self.assertEqual(first.object.root, second.object.root)
      slots.add(first.object.root)
    self.assertEqual(
      slots, {("constant", t) for t in range(deep_programs.TOKENS)}
    )

  def test_control_a_loop_carrying_2000_ordered_leaves(self):
    self.assertEqual(timed_races("carry", racy=False), [])

  def test_42_nested_loops(self):
    # The read of the slot as the program got it races with the write of
    # every level, the innermost included.
    found = timed_races("nested", racy=True)
    reads, writes = reads_and_writes(found)
    self.assertLen(found, deep_programs.LEVELS)
    self.assertLen(reads, 1)
    self.assertLen(writes, deep_programs.LEVELS)
    self.assertLen({w.computation for w in writes}, deep_programs.LEVELS)

  def test_control_42_nested_ordered_loops(self):
    self.assertEqual(timed_races("nested", racy=False), [])


if __name__ == "__main__":
  absltest.main()
