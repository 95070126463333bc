"""The sanitizer's race rules on hand-made records, each case beside its
control: pairing by what ran (loops, branches), what a call touches (the
static check's policy), interleaving across executions, and the host
callbacks' executions."""

import dataclasses

from absl.testing import absltest

from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
)
from entangle_jax.testing._sanitize import (
  callbacks,
  checks,
  host_placement,
  sites,
)
from entangle_jax.testing._sanitize.calls import (
  HOST_FAMILY,
  SanitizedCall,
  touches,
)

DECLARATIONS = Declarations(
  (
    TargetDeclaration("w", "write", object=0),
    TargetDeclaration("r", "read", object=0),
    TargetDeclaration("lib", "write"),
  )
)
LOOP = sites.Frame(sites.LOOP, 0, 1)


def _branch(region, construct=1):
  return sites.Frame(sites.BRANCH, construct, region)


def _site(position, context=(), module=None, target="w", **kw):
  module = module or sites.SanitizedModule("jit_f", 0, "Host")
  return sites.CallSite(
    position,
    module,
    position,
    target,
    in_loop=any(f.kind == sites.LOOP for f in context),
    in_branch=any(f.kind == sites.BRANCH for f in context),
    context=tuple(context),
    **kw,
  )


def _call(target, start, end, values=(7,), site=None, run_id=1, **kw):
  operands = ((0, tuple(values)),) if values is not None else ()
  kw.setdefault("family", "lib")
  family = kw.pop("family")
  return SanitizedCall(
    target, "Host", family, 1, start, end, run_id, site, operands, **kw
  )


def _found(*calls):
  return {c: touches(c, DECLARATIONS) for c in calls}


def _races(*calls):
  unpaired = []
  found = checks.races(_found(*calls), unpaired)
  return found, unpaired


class LoopPairingTest(absltest.TestCase):
  def test_two_branches_of_one_cond_in_a_loop_never_pair(self):
    # fori_loop(8, cond(i % 2 == 0, write 1, write 2)): the false branch
    # (place 1) ran on odd iterations, the true branch (place 2) on even
    # ones, one after the other.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    odd = _site(1, (LOOP, _branch(0)), module)
    even = _site(2, (LOOP, _branch(1)), module)
    calls = []
    for i in range(8):
      site = even if i % 2 == 0 else odd
      calls.append(_call("w", 10 * i, 10 * i + 5, site=site))
    races, unpaired = _races(*calls)
    self.assertEqual(races, [])
    self.assertEqual(unpaired, [])
    # Control: the same records as two places that both run every
    # iteration (one region) are out of order in each iteration.
    first = _site(1, (LOOP,), module)
    second = _site(2, (LOOP,), module)
    control = [
      _call("w", 10 * i + 5, 10 * i + 9, site=first) for i in range(4)
    ] + [_call("w", 10 * i, 10 * i + 4, site=second) for i in range(4)]
    races, _ = _races(*control)
    self.assertLen(races, 4)
    self.assertEqual({r.kind for r in races}, {checks.OUT_OF_ORDER})

  def test_a_branch_that_ran_some_iterations_is_said_not_guessed(self):
    # cond(i == 3, write) then a write in the body, 8 iterations.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    once = _site(1, (LOOP, _branch(1)), module)
    each = _site(2, (LOOP,), module)
    calls = [_call("w", 10 * i + 5, 10 * i + 9, site=each) for i in range(8)]
    calls.append(_call("w", 30, 34, site=once))
    races, unpaired = _races(*calls)
    self.assertEqual(races, [])
    (left,) = unpaired
    self.assertEqual((left.first, left.second), (once, each))
    self.assertEqual(left.calls, 9)
    self.assertIn("branch inside a loop", left.why)
    # Control: the branch ran every iteration, so the k-th calls pair,
    # and iteration 3's second call returned before its first began.
    every = [_call("w", 10 * i, 10 * i + 4, site=once) for i in range(8)]
    every[3] = _call("w", 39, 39, site=once)
    races, unpaired = _races(*calls[:8], *every)
    self.assertEqual(unpaired, [])
    (race,) = races
    self.assertEqual((race.first, race.second), (every[3], calls[3]))

  def test_calls_before_a_loop_pair_with_every_iteration(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    before = _site(0, (), module)
    body = _site(1, (LOOP,), module)
    first = _call("w", 50, 60, site=before)
    iterations = [_call("w", 10 * i, 10 * i + 5, site=body) for i in range(3)]
    races, unpaired = _races(first, *iterations)
    self.assertEqual(unpaired, [])
    self.assertLen(races, 3)  # Each iteration returned before it began.
    # Control: the loop ran after the call before it.
    late = [_call("w", 100 + i, 100 + i, site=body) for i in range(3)]
    self.assertEqual(_races(first, *late), ([], []))

  def test_a_call_after_a_loop_pairs_with_every_iteration_it_preceded(self):
    # fori_loop(3, write) then an unordered write that needs nothing of
    # the loop (issue 78, defect 5): it ran and returned before the
    # loop's last two iterations began, which is two races, not one.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    body = _site(0, (LOOP,), module)
    after = _site(1, (), module)
    iterations = [_call("w", 10 * i, 10 * i + 5, site=body) for i in range(3)]
    early = _call("w", 6, 8, site=after)
    races, unpaired = _races(*iterations, early)
    self.assertEqual(unpaired, [])
    self.assertEqual(
      {(r.kind, r.first, r.second) for r in races},
      {(checks.OUT_OF_ORDER, i, early) for i in iterations[1:]},
    )
    # Before every iteration: a race with each.
    first = _call("w", 0, 0, site=after)
    late = [_call("w", 10 + i, 10 + i, site=body) for i in range(3)]
    races, _ = _races(*late, first)
    self.assertEqual({r.first for r in races}, set(late))
    # Control: it ran after the loop, as the program made it.
    done = _call("w", 30, 31, site=after)
    self.assertEqual(_races(*iterations, done), ([], []))

  def test_why_an_inner_loop_is_not_compared_names_the_platform(self):
    # A write in an outer loop, reads in an inner one: paired only by the
    # iteration markers, which are native calls placed only in a module
    # on one CPU device. On the TPU v5e (tools/tpu_check.py's
    # sanitizer_nested) every such call was "not compared" with XLA
    # blamed for a marker that was never there.
    inner = sites.Frame(sites.LOOP, 1, 1)

    def unpaired_why(platform, markers):
      module = sites.SanitizedModule("jit_f", 0, platform)
      module.iteration_markers.update(markers)
      write = _site(0, (LOOP,), module)
      read = _site(1, (LOOP, inner), module, target="r")
      calls = [_call("w", 10 * i, 10 * i + 5, site=write) for i in range(3)]
      calls += [
        _call("r", 10 * i + 6 + j, 10 * i + 7 + j, site=read)
        for i in range(3)
        for j in range(2)
      ]
      unpaired = []
      checks.races(_found(*calls), unpaired, iteration=lambda c, loop: None)
      self.assertLen(unpaired, 1)
      return unpaired[0].why

    self.assertIn("this one runs on tpu", unpaired_why("tpu", {}))
    # Control: markers placed (a CPU module) whose calls left no record.
    on_cpu = unpaired_why("Host", {9: 0})
    self.assertIn("XLA removed or unrolled the loop", on_cpu)
    self.assertNotIn("runs on", on_cpu)


class TripCountTest(absltest.TestCase):
  """Where no marker counts a loop's iterations (a TPU module), an inner
  loop whose trip count the program states (`sites.SanitizedModule
  .loop_trips`) pairs its calls by count: the k-th call of a place that
  runs n times an outer iteration ran in iteration k // n."""

  INNER = sites.Frame(sites.LOOP, 1, 1)

  def _calls(self, trips, late=(1, 0)):
    # A write, then an inner loop of 2 reads, in each of 3 iterations;
    # the read `late` (outer, inner) began before its iteration's write.
    module = sites.SanitizedModule("jit_f", 0, "tpu")
    module.loop_trips.update(trips)
    write = _site(0, (LOOP,), module)
    read = _site(1, (LOOP, self.INNER), module, target="r")
    calls = [_call("w", 10 * i, 10 * i + 3, site=write) for i in range(3)]
    for i in range(3):
      for j in range(2):
        start = 10 * i + 4 + j
        if (i, j) == late:
          start = 10 * i - 1  # Before the write of its iteration.
        calls.append(_call("r", start, start, site=read))
    return calls

  def _races(self, calls):
    unpaired = []
    found = checks.races(
      _found(*calls), unpaired, iteration=lambda c, loop: None
    )
    return found, unpaired

  def test_the_iteration_that_raced_is_reported_and_no_other(self):
    calls = self._calls({0: 3, 1: 2})
    races, unpaired = self._races(calls)
    self.assertEqual(unpaired, [])
    (race,) = races
    self.assertEqual({race.first.start_ns, race.second.start_ns}, {10, 9})
    # Control: every read after its write, nothing.
    self.assertEqual(
      self._races(self._calls({0: 3, 1: 2}, late=None)), ([], [])
    )

  def test_without_the_inner_trip_count_it_is_not_compared(self):
    races, unpaired = self._races(self._calls({0: 3}))
    self.assertEqual(races, [])
    self.assertLen(unpaired, 1)

  def test_calls_that_did_not_run_as_often_as_the_count_are_not_paired(self):
    # The inner loop says 3 trips, the records hold 2 an iteration.
    races, unpaired = self._races(self._calls({0: 3, 1: 3}))
    self.assertEqual(races, [])
    self.assertLen(unpaired, 1)


class MergedTest(absltest.TestCase):
  """Two places that each run once an iteration, one of which ran fewer
  times (XLA moved it out of the loop, or merged its calls)."""

  def test_a_read_hoisted_before_the_writes_is_a_race(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    write = _site(0, (LOOP,), module)
    read = _site(1, (LOOP,), module, target="r")
    # The read ran once, before 7 writes.
    hoisted = _call("r", 0, 5, site=read)
    writes = [
      _call("w", 10 * i + 10, 10 * i + 15, site=write) for i in range(7)
    ]
    races, unpaired = _races(hoisted, *writes)
    self.assertEqual(unpaired, [])
    (race,) = races
    self.assertEqual(race.kind, checks.MERGED)
    self.assertEqual(race.runs, (7, 1))
    # Paired with the first write it returned before.
    self.assertEqual((race.first, race.second), (writes[0], hoisted))
    # Control: one read an iteration, each after its write: no race.
    reads = [_call("r", 10 * i + 16, 10 * i + 18, site=read) for i in range(7)]
    self.assertEqual(_races(*reads, *writes), ([], []))

  def test_a_call_that_ran_once_after_every_other_is_a_race_too(self):
    # Sunk after the loop: it ran after every write, yet stands for each
    # iteration's read, which comes before the next iteration's write.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    write = _site(0, (LOOP,), module)
    read = _site(1, (LOOP,), module, target="r")
    writes = [_call("w", 10 * i, 10 * i + 5, site=write) for i in range(3)]
    sunk = _call("r", 100, 105, site=read)
    (race,) = _races(*writes, sunk)[0]
    self.assertEqual((race.kind, race.first, race.second),
                     (checks.MERGED, writes[-1], sunk))  # fmt: skip
    # Control: a branch's place may run fewer times; not a race, but
    # said (which iteration it ran in is not recorded).
    branch = _site(1, (LOOP, _branch(0)), module, target="r")
    races, unpaired = _races(*writes, _call("r", 100, 105, site=branch))
    self.assertEqual(races, [])
    self.assertLen(unpaired, 1)

  def test_places_on_different_objects_are_no_race(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    write = _site(0, (LOOP,), module)
    read = _site(1, (LOOP,), module, target="r")
    writes = [
      _call("w", 10 * i + 10, 10 * i + 15, site=write) for i in range(3)
    ]
    self.assertEqual(_races(_call("r", 0, 5, (8,), site=read), *writes)[0], [])


class TouchTest(absltest.TestCase):
  def test_pure_callbacks_touch_nothing(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    pure = [
      _site(k, (), module, target="xla_ffi_python_cpu_callback", pure=True)
      for k in (0, 1)
    ]
    calls = [
      _call("cb", 0, 10, None, site=s, family=HOST_FAMILY, function="sin")
      for s in pure
    ]
    self.assertEqual(_races(*calls), ([], []))
    # Control: the same two as io_callbacks (side-effecting) race.
    effects = [
      _site(k, (), module, target="xla_ffi_python_cpu_callback") for k in (0, 1)
    ]
    calls = [
      _call("cb", 0, 10, None, site=s, family=HOST_FAMILY, function="f")
      for s in effects
    ]
    (race,) = _races(*calls)[0]
    self.assertEqual(race.kind, checks.OVERLAP)

  def test_a_host_callback_is_what_its_declaration_says(self):
    # The one access policy reads a host callback's target as any other's
    # (issue 59): a project that declares it read-only makes its calls
    # reads here as in the static check (which read its own declaration
    # while the sanitizer took every host callback for a write).
    target = "xla_ffi_python_cpu_callback"
    module = sites.SanitizedModule("jit_f", 0, "Host")
    calls = [
      _call(
        target,
        0,
        10,
        None,
        site=_site(k, (), module, target=target),
        family=HOST_FAMILY,
        function="f",
      )
      for k in (0, 1)
    ]
    read = Declarations((TargetDeclaration(target, "read"),))
    self.assertEqual(touches(calls[0], read).mode, "read")
    found = {c: touches(c, read) for c in calls}
    self.assertEqual(checks.races(found, [], checks.executions(found)), [])
    nothing = Declarations((TargetDeclaration(target, "none"),))
    self.assertEqual(touches(calls[0], nothing).objects, ())
    # Control: declared as the built-in declaration does (may write
    # anything), the two race on Python state.
    found = _found(*calls)
    (race,) = checks.races(found, [], checks.executions(found))
    self.assertEqual(
      str(race.object), str(touches(calls[0], DECLARATIONS).objects[0])
    )
    self.assertIn("Python state", str(race.object))

  def test_more_values_than_a_record_holds_touch_any_object(self):
    wide = _call("w", 0, 10, range(16), truncated=True)
    slot_20 = _call("r", 5, 15, (20,))
    (race,) = _races(wide, slot_20)[0]
    self.assertEqual(race.object.value, 20)
    self.assertIn("more than 4096 values", str(touches(wide, DECLARATIONS)))
    # Control: the same call recorded whole touches slots 0 to 15 only.
    whole = _call("w", 0, 10, range(16))
    self.assertEqual(_races(whole, slot_20), ([], []))

  def test_an_undeclared_target_may_touch_any_object(self):
    # Its operands (a large integer array, a binding's pickled keyword
    # arguments) are no evidence of which object: it may write anything,
    # as the static check reads it.
    mystery = _call("mystery", 0, 10, tuple(range(100, 132)))
    slot = _call("r", 5, 15, (3,))
    (race,) = _races(mystery, slot)[0]
    self.assertEqual(race.object.value, 3)
    # Control: one after the other, no race.
    later = _call("r", 10, 15, (3,))
    self.assertEqual(_races(mystery, later), ([], []))

  def test_two_packages_calls_on_one_value_are_one_object(self):
    a = _call("w", 0, 10, (5,), family="store")
    b = _call("r", 5, 15, (5,), family="binding")
    (race,) = _races(a, b)[0]
    self.assertEqual(race.object.value, 5)
    # Control: different values.
    c = _call("r", 5, 15, (6,), family="binding")
    self.assertEqual(_races(a, c), ([], []))


class InterleavingTest(absltest.TestCase):
  def test_another_executions_write_between_two_calls(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    write, read = _site(0, (), module), _site(1, (), module, target="r")
    a = _call("w", 0, 10, site=write, run_id=1)
    b = _call("r", 30, 40, site=read, run_id=1)
    other = _call("w", 15, 25, site=write, run_id=2)
    races, _ = _races(a, b, other)
    (race,) = [r for r in races if r.kind == checks.INTERLEAVED]
    self.assertEqual((race.first, race.second, race.then), (a, other, b))
    # Control: the user ran the two executions one after the other.
    after = _call("w", 50, 60, site=write, run_id=2)
    self.assertEqual(_races(a, b, after), ([], []))

  def test_a_write_whose_window_meets_the_first_call_may_have_landed(self):
    # The windows are the trampoline's, wider than the handler's: a write
    # of another execution still running when `a` began, or begun before
    # `a` returned, may have taken effect after it, and `b` read it. It
    # is an overlap with `a`, and interleaved between `a` and `b`.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    write, read = _site(0, (), module), _site(1, (), module, target="r")
    a = _call("w", 10, 20, site=write, run_id=1)
    b = _call("r", 40, 50, site=read, run_id=1)
    for other in (
      _call("w", 5, 12, site=write, run_id=2),  # Began first.
      _call("w", 18, 25, site=write, run_id=2),  # Began during `a`.
      _call("w", 35, 45, site=write, run_id=2),  # Still running at `b`.
    ):
      races, _ = _races(a, b, other)
      kinds = sorted(r.kind for r in races)
      self.assertEqual(kinds, [checks.INTERLEAVED, checks.OVERLAP], other)
      (race,) = [r for r in races if r.kind == checks.INTERLEAVED]
      self.assertEqual((race.first, race.second, race.then), (a, other, b))
    # Controls: a write wholly before `a`, or begun after `b` began: the
    # records place it before `a`, or after `b`'s read.
    for other in (
      _call("w", 0, 10, site=write, run_id=2),
      _call("w", 42, 60, site=write, run_id=2),
    ):
      kinds = [r.kind for r in _races(a, b, other)[0]]
      self.assertNotIn(checks.INTERLEAVED, kinds, other)


class HostRunsTest(absltest.TestCase):
  def test_a_loops_callbacks_join_the_one_execution(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    outside = _site(0, (), module, target="cb")
    inside = _site(1, (LOOP,), module, target="cb")
    calls = [
      _call("cb", 0, 1, None, site=outside, run_id=-1, function="f"),
      _call(
        "cb",
        2,
        3,
        None,
        site=inside,
        run_id=callbacks.UNKNOWN_RUN,
        function="g",
      ),
    ]
    placed = host_placement.host_runs(calls)
    self.assertEqual([c.run_id for c in placed], [-1, -1])
    # Control: the module ran twice, at once on two threads; which
    # execution the loop's call ran in is not known: it stays unplaced.
    twice = [
      *calls,
      _call("cb", 1, 5, None, site=outside, run_id=-2, function="f"),
    ]
    twice[2] = dataclasses.replace(twice[2], thread=2)
    placed = host_placement.host_runs(twice)
    self.assertEqual(placed[1].run_id, callbacks.UNKNOWN_RUN)

  def _twice(self, *, thread=1, anchor_first=True):
    """A module whose only host callbacks are in a loop (`g`, two calls an
    execution), with the sanitizer's anchor counting its two executions,
    one after the other; the second on `thread`."""
    module = sites.SanitizedModule("jit_f", 0, "Host")
    anchor = _site(0, (), module, target="cb", host_callback=sites.ANCHOR)
    inside = _site(1, (LOOP,), module, target="cb")
    unknown = callbacks.UNKNOWN_RUN
    calls = []
    for k, at in enumerate((0, 100)):
      first = 0 if anchor_first else 10
      calls += [
        _call("cb", at + first, at + first + 1, None, site=anchor,
              run_id=-1 - k, function=sites.ANCHOR),
        _call("cb", at + 2, at + 3, None, site=inside, run_id=unknown,
              function="g"),
        _call("cb", at + 4, at + 5, None, site=inside, run_id=unknown,
              function="g"),
      ]  # fmt: skip
    if thread != 1:
      calls[3:] = [dataclasses.replace(c, thread=thread) for c in calls[3:]]
    return sorted(calls, key=lambda c: c.start_ns)

  def test_a_module_run_twice_one_execution_after_the_other(self):
    placed = host_placement.host_runs(self._twice())
    self.assertEqual([c.run_id for c in placed], [-1, -1, -2, -2])
    # Controls: on two threads, or with a loop's call before the first
    # execution's anchor, the executions are not told apart.
    for calls in (self._twice(thread=2), self._twice(anchor_first=False)):
      placed = host_placement.host_runs(calls)
      self.assertEqual({c.run_id for c in placed}, {callbacks.UNKNOWN_RUN})

  def test_a_module_run_twice_with_a_native_call_is_not_placed(self):
    calls = self._twice()
    module = calls[0].site.module
    native = _call("w", 6, 7, site=_site(2, (), module), run_id=77)
    placed = host_placement.host_runs([*calls, native])
    unknown = callbacks.UNKNOWN_RUN
    self.assertEqual([c.run_id for c in placed], [unknown] * 4 + [77])

  def _why(self, calls, native=None):
    """Why `calls`' host callbacks were left unplaced, by reason."""
    why: dict[str, int] = {}
    host = [c for c in calls if c.function is not None]
    serials = {c.site.module.serial for c in calls if c.function is None}
    host_placement.place_host_calls(host, native or {}, serials, why)
    return why

  def test_why_a_loops_calls_were_not_placed_is_what_the_records_showed(self):
    unknown = callbacks.UNKNOWN_RUN
    # A module that ran once, whose only callbacks are in a loop, and
    # whose counter never ran: never said to have run more than once.
    module = sites.SanitizedModule("jit_f", 0, "Host")
    module.anchor = _site(
      0, (), module, target="cb", host_callback=sites.ANCHOR
    )
    inside = _site(1, (LOOP,), module, target="cb")
    loop = [
      _call("cb", k, k + 1, None, site=inside, run_id=unknown, function="g")
      for k in range(3)
    ]
    (reason,) = self._why(loop)
    self.assertIn("never ran", reason)
    self.assertNotIn("times", reason)
    self.assertEqual(self._why(loop)[reason], 3)
    # With no counter added (another platform, several partitions).
    module.anchor = None
    (reason,) = self._why(loop)
    self.assertIn("has no execution counter", reason)
    # The controls: executions that were counted say how many there were.
    (reason,) = self._why(self._twice(thread=2))
    self.assertIn("ran 2 times", reason)
    self.assertIn("do not separate", reason)
    calls = self._twice()
    native = _call(
      "w", 6, 7, site=_site(2, (), calls[0].site.module), run_id=77
    )
    (reason,) = self._why([*calls, native], {0: {77}})
    self.assertIn("ran 2 times and made native calls", reason)
    # Placed calls give no reason.
    self.assertEqual(self._why(self._twice()), {})


class OneStreamTest(absltest.TestCase):
  """A module of one accelerator device whose host callbacks are all in
  loops, so that nothing counts its executions (a TPU module with
  ``io_callback`` in a ``fori_loop``): they ran one after another in the
  device's stream, and its calls are one sequence."""

  def _calls(self, platform="tpu", *, one_device=True, loops=(LOOP, LOOP)):
    """Three executions of two iterations each: a write (`w`, place 0)
    then a read (`r`, place 1) each iteration, both host callbacks on
    Python state; in the second execution's first iteration the read
    ran before the write."""
    module = sites.SanitizedModule("jit_f", 0, platform)
    module.one_device = one_device
    write = _site(0, (loops[0],), module, target="cb")
    read = _site(1, (loops[1],), module, target="cb")
    unknown = callbacks.UNKNOWN_RUN
    calls = []
    at = 0
    for execution in range(3):
      for i in range(2):
        w, r = (at, at + 2), (at + 4, at + 6)
        if (execution, i) == (1, 0):
          w, r = r, w  # The read first.
        calls += [
          _call("cb", *w, None, site=write, run_id=unknown, function="w",
                family=HOST_FAMILY),
          _call("cb", *r, None, site=read, run_id=unknown, function="r",
                family=HOST_FAMILY),
        ]  # fmt: skip
        at += 10
    return sorted(calls, key=lambda c: c.start_ns)

  def test_a_loops_iterations_pair_across_the_executions(self):
    placed = host_placement.host_runs(self._calls())
    self.assertEqual({c.run_id for c in placed}, {callbacks.SEQUENCE_RUN})
    races, unpaired = _races(*placed)
    self.assertEqual(unpaired, [])
    # One race: the third iteration of the sequence (the second
    # execution's first), its read before its write.
    self.assertLen(races, 1)
    race = races[0]
    self.assertEqual(race.kind, checks.OUT_OF_ORDER)
    self.assertEqual((race.first.function, race.second.function), ("w", "r"))
    self.assertEqual(race.first.start_ns, 24)

  def test_not_on_a_cpu_nor_on_several_devices(self):
    # Controls: XLA:CPU runs executions at once on several threads, a GPU
    # is not measured yet, and a module of several devices runs on each:
    # the calls stay unplaced.
    for calls in (
      self._calls("Host"),
      self._calls("cuda"),
      self._calls(one_device=False),
    ):
      placed = host_placement.host_runs(calls)
      self.assertEqual({c.run_id for c in placed}, {callbacks.UNKNOWN_RUN})

  def test_places_of_two_loops_are_not_paired(self):
    # A loop's write, then another loop's read: which execution each call
    # ran in is not known, and no iteration joins them.
    other = sites.Frame(sites.LOOP, 1, 1)
    placed = host_placement.host_runs(self._calls(loops=(LOOP, other)))
    races, unpaired = _races(*placed)
    self.assertEqual(races, [])
    self.assertLen(unpaired, 1)
    self.assertIn("executions were not counted", unpaired[0].why)
    self.assertEqual(unpaired[0].calls, 12)


if __name__ == "__main__":
  absltest.main()
