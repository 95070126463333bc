"""The sanitizer's placing and pairing of host callbacks in loops, on calls
a TPU v5e recorded (`data/tpu_sanitizer_loops.json` and, for nested loops,
`data/tpu_sanitizer_nested.json`, written by ``tools/tpu_check.py``'s
``sanitizer_loops`` and ``sanitizer_nested``; each file's ``_about`` says
how), replayed here without a TPU.

Each callback's body stamped its name, its loop iteration, the run and the
sanitizer's clock; the stamp inside a recorded call's window names the
call's iteration, and an iteration whose read's body ran before its
write's raced (the control, which does not ask the sanitizer). A TPU
module gets no execution op, and nothing outside its loops counts its
executions: its calls are paired as one sequence of iterations
(`host_placement.place_host_calls`). Every iteration that raced is reported, and
no other; and the same records taken for a CPU module's stay not
compared (the control that the rule is what compares them).
"""

import json
import pathlib

from absl.testing import absltest

from entangle_jax._src.targets.declaration import Declarations
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

DATA = pathlib.Path(__file__).resolve().parent / "data"
RECORDED = json.loads((DATA / "tpu_sanitizer_loops.json").read_text())
# Nested loops (issue 78), from ``sanitizer_nested``: a slow write in an
# outer fori_loop's body, reads in an inner fori_loop, a scan or as
# jax.debug.callback; in the ordered control the reads take the write's
# result.
NESTED = json.loads((DATA / "tpu_sanitizer_nested.json").read_text())


def _calls(shape: dict, platform: str | None = None) -> list[SanitizedCall]:
  """The shape's recorded calls, as the sanitizer had them before placing
  them: a call in a loop with no known execution, one outside every loop
  numbered by its place (`callbacks.recorder`)."""
  modules: dict[int, sites.SanitizedModule] = {}
  places: dict[tuple[int, int], sites.CallSite] = {}
  counts: dict[tuple[int, int], int] = {}
  out = []
  for r in shape["records"]:
    serial = r["module_serial"]
    if serial not in modules:
      module = sites.SanitizedModule(
        r["module"], serial, platform or r["platform"]
      )
      module.one_device = r["one_device"]
      # Recorded since the nested shapes (the loops' files lack it).
      trips = r.get("loop_trips") or {}
      module.loop_trips = {int(k): v for k, v in trips.items()}
      modules[serial] = module
    key = (serial, r["position"])
    context = tuple(sites.Frame(*f) for f in r["context"])
    if key not in places:
      places[key] = sites.CallSite(
        len(places),
        modules[serial],
        r["position"],
        r["target"],
        in_loop=any(f.kind == sites.LOOP for f in context),
        in_branch=any(f.kind == sites.BRANCH for f in context),
        host_callback=r["function"],
        context=context,
        pure=r["pure"],
      )
    if context:
      run_id = callbacks.UNKNOWN_RUN
    else:
      counts[key] = counts.get(key, 0) + 1
      run_id = -counts[key]
    out.append(
      SanitizedCall(
        r["target"],
        r["platform"],
        HOST_FAMILY,
        r["thread"],
        r["start_ns"],
        r["end_ns"],
        run_id,
        places[key],
        (),
        function=r["function"],
      )
    )
  return out


def _iteration(call: SanitizedCall, stamps: list, tag: str) -> tuple:
  """The (run, iteration) whose body stamp of `tag` lies in `call`'s
  window."""
  for t, i, run, at in stamps:
    if t == tag and call.start_ns <= at <= call.end_ns:
      return (run, i)
  raise AssertionError(f"no stamp {tag} in {call}")


def _nested_truth(stamps: list) -> set:
  """The (run, outer, inner) reads whose body ran before their outer
  iteration's write's."""
  writes = {(run, i): at for t, i, _, run, at in stamps if t == "w"}
  return {
    (run, i, j)
    for t, i, j, run, at in stamps
    if t == "r" and (run, i) in writes and at < writes[(run, i)]
  }


def _nested_read(call: SanitizedCall, stamps: list) -> tuple:
  """The (run, outer, inner) of the read stamp in `call`'s window."""
  for t, i, j, run, at in stamps:
    if t == "r" and call.start_ns <= at <= call.end_ns:
      return (run, i, j)
  raise AssertionError(f"no read stamp in {call}")


def _check(calls: list[SanitizedCall]):
  placed = host_placement.host_runs(calls)
  found = {c: touches(c, Declarations(())) for c in placed}
  unpaired: list[checks.Unpaired] = []
  races = checks.races(found, unpaired)
  left = sum(1 for c in placed if c.run_id == callbacks.UNKNOWN_RUN)
  return races, unpaired, left


def _truth(stamps: list) -> set:
  when = {(t, run, i): at for t, i, run, at in stamps}
  return {
    (run, i)
    for (t, run, i), at in when.items()
    if t == "r" and ("w", run, i) in when and at < when[("w", run, i)]
  }


def _read(call: SanitizedCall) -> bool:
  return (call.function or "").rsplit(".", 1)[-1] in ("read", "log")


class TpuRecordsTest(absltest.TestCase):
  def test_every_iteration_that_raced_is_reported_and_no_other(self):
    raced = 0
    for name in ("debug_callback_x3", "pure_first_x3", "two_unordered_x3"):
      shape = RECORDED[name]
      races, unpaired, left = _check(_calls(shape))
      self.assertEqual((unpaired, left), ([], 0), name)
      reported = {
        _iteration(c, shape["stamps"], "r")
        for race in races
        for c in (race.first, race.second)
        if _read(c)
      }
      self.assertEqual(reported, _truth(shape["stamps"]), name)
      raced += len(reported)
    # The control: some iteration raced on the TPU (else this shows
    # nothing): the debug.callback's, which the device does not wait for.
    self.assertGreater(raced, 0)

  def test_two_loops_are_not_compared_and_say_why(self):
    races, unpaired, left = _check(_calls(RECORDED["two_loops_x3"]))
    self.assertEqual((races, left), ([], 0))
    self.assertLen(unpaired, 1)
    self.assertIn("executions were not counted", unpaired[0].why)

  def test_nested_loops_every_read_that_raced_is_reported_and_no_other(
    self,
  ):
    raced = {}
    for name in ("fori_in_fori_x3", "scan_x3", "debug_in_fori_x3"):
      shape = NESTED[name]
      races, unpaired, left = _check(_calls(shape))
      self.assertEqual((unpaired, left), ([], 0), name)
      reported = {
        _nested_read(c, shape["stamps"])
        for race in races
        for c in (race.first, race.second)
        if _read(c)
      }
      self.assertEqual(reported, _nested_truth(shape["stamps"]), name)
      raced[name] = len(reported)
    # Some read raced on the TPU in each shape (else this shows nothing).
    self.assertNotIn(0, raced.values(), raced)

  def test_nested_loops_ordered_by_data_are_compared_and_clean(self):
    # The control for the above: the same nest with the reads taking the
    # write's result ran in order, and every call was still placed.
    shape = NESTED["fori_in_fori_ordered_x3"]
    races, unpaired, left = _check(_calls(shape))
    self.assertEqual(_nested_truth(shape["stamps"]), set())
    self.assertEqual((races, unpaired, left), ([], [], 0))
    self.assertLen(shape["records"], 27)

  def test_on_a_cpu_the_same_records_stay_not_compared(self):
    shape = RECORDED["debug_callback_x3"]
    races, unpaired, left = _check(_calls(shape, platform="Host"))
    self.assertEqual((races, unpaired), ([], []))
    self.assertEqual(left, len(shape["records"]))


if __name__ == "__main__":
  absltest.main()
