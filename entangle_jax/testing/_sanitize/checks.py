"""Races and contradictions in a sanitized run's calls.

* A race is two calls on one object, at least one a write by its
  declaration (undeclared: a write), that overlapped in time
  (``"overlap"``), or that, in one execution of one module, ran in another
  order than the program's (``"out of order"``: the later call had
  returned before the earlier one began), or a write of another execution
  that ran between two calls of one execution on that object
  (``"interleaved"``); or, in one execution, two places that both run once
  an iteration of a loop they are in whose calls ran different numbers of
  times (``"merged"``: XLA moved one out of the loop, or merged its calls,
  so its calls cannot each keep the program's order with their
  iteration's call of the other).
* Calls are paired by what ran: the calls of two places in one execution
  are compared for order only where the records say which ran in one
  iteration (see `pairing`); where they cannot, the pair of places is an
  `Unpaired`, said in the report, and never a guess.
* A contradiction is two calls in one execution that the declarations say
  never touch one object (a safe pair, or different elements of one array
  declared distinct, as the static check reads them) or that were made
  under different ``Resource`` names (named ``Resource`` objects, or the
  arguments of ``in_program_order(f, distinct_arguments=True)``), whose
  object operands held the same value; or one call whose object operand,
  declared to hold distinct handles, held one twice.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from entangle_jax._src import access_policy, conflict_rule, reason_words
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._sanitize import callbacks, gaps, sites
from entangle_jax.testing._sanitize.calls import (
  SanitizedCall,
  SanitizedObject,
  Touch,
  touches,
)

OVERLAP = "overlap"
OUT_OF_ORDER = "out of order"
INTERLEAVED = "interleaved"
MERGED = "merged"


@dataclasses.dataclass(frozen=True, eq=False)
class SanitizerRace:
  """Two calls on one object that raced at run time.

  Attributes:
    kind: ``"overlap"`` (they ran at the same time), ``"out of order"``
      (in one execution, `second` returned before `first` began, though
      the program made `first` first) or ``"interleaved"`` (`second`, a
      write of another execution, ran after `first` and before `then`,
      two calls of one execution) or ``"merged"`` (in one execution, the
      places of `first` and `second`, each run once an iteration of a loop
      both are in, ran `runs` times: XLA moved one out of the loop or
      merged its calls, so each of the fewer calls stands for several of
      the program's and cannot keep its order with every call of the
      other place).
    first: for ``"out of order"`` and ``"merged"`` the call the program
      made first (for ``"merged"``, of the place made first); for
      ``"overlap"`` the one that began first; for ``"interleaved"`` the
      earlier call of the execution it landed in.
    second: the other call.
    object: the object both touched.
    then: for ``"interleaved"``, the later call of `first`'s execution.
    runs: for ``"merged"``, how many times the places of `first` and
      `second` ran in that execution.
  """

  kind: str
  first: SanitizedCall
  second: SanitizedCall
  object: SanitizedObject
  then: SanitizedCall | None = None
  runs: tuple[int, int] | None = None

  def __str__(self) -> str:
    return (
      f"{self.kind}: {self.first.target} and {self.second.target} on "
      f"{self.object}"
    )


@dataclasses.dataclass(frozen=True, eq=False)
class Contradiction:
  """Calls the declarations call distinct that named one object.

  Attributes:
    first, second: the calls (the same call when one call's operand held
      one handle twice).
    object: the object both named.
    declaration: what they contradict, in words.
  """

  first: SanitizedCall
  second: SanitizedCall
  object: SanitizedObject
  declaration: str

  def __str__(self) -> str:
    return (
      f"{self.first.target} and {self.second.target} named {self.object}, "
      f"though {self.declaration}"
    )


@dataclasses.dataclass(frozen=True)
class Unpaired:
  """Two places of one module whose calls touched one object but were not
  compared for order: the records do not say which of their calls ran in
  one iteration.

  Attributes:
    first, second: the places, in program order.
    why: why not, in words.
    calls: how many calls of the two places this left uncompared.
    members: those calls (a place unpaired with two others is in both
      pairs: the report counts the calls of all pairs once each).
  """

  first: sites.CallSite
  second: sites.CallSite
  why: str
  calls: int
  members: frozenset[SanitizedCall] = dataclasses.field(
    default=frozenset(), repr=False, compare=False
  )

  def __str__(self) -> str:
    return f"{self.first} and {self.second}: {self.why}"


def touched(
  calls: list[SanitizedCall], declarations: Declarations
) -> dict[SanitizedCall, Touch]:
  """What each call touches. Calls with equal targets and operands share
  one answer (asked once)."""
  cache: dict[tuple, Touch] = {}
  out: dict[SanitizedCall, Touch] = {}
  for c in calls:
    key = (c.target, c.family, c.operands, c.truncated, c.site)
    found = cache.get(key)
    if found is None:
      found = cache[key] = touches(c, declarations)
    out[c] = found
  return out


def _shared(a: Touch, b: Touch) -> list[SanitizedObject]:
  """The objects both of two touches may touch (a call that may touch
  anything shares every object of the other)."""
  if not a.objects or not b.objects:
    return []
  if any(o.anything for o in a.objects):
    return list(b.objects)
  if any(o.anything for o in b.objects):
    return list(a.objects)
  theirs = set(b.objects)
  return [o for o in a.objects if o in theirs]


def _conflicts(a: Touch, b: Touch) -> list[SanitizedObject]:
  if not conflict_rule.modes_conflict(a.mode, b.mode):
    return []
  return _shared(a, b)


def overlaps(found: dict[SanitizedCall, Touch]) -> Iterator[SanitizerRace]:
  """Pairs on one object, one writing, that ran at the same time: one
  sweep over the calls in order of start (O(n log n), and the pairs that
  overlap in time)."""
  ordered = [c for c, t in found.items() if t.objects]
  ordered.sort(key=_start)  # Linear when they come sorted, as they do.
  active: list[SanitizedCall] = []
  for b in ordered:
    start = b.start_ns
    if len(active) == 1:
      if active[0].end_ns <= start:
        active[0] = b
        continue
    elif active:
      active = [a for a in active if a.end_ns > start]
    touch = found[b]
    for a in active:
      for obj in _conflicts(found[a], touch):
        yield SanitizerRace(OVERLAP, a, b, obj)
    active.append(b)


def executions(
  found: dict[SanitizedCall, Touch],
) -> dict[tuple[int, int], list[SanitizedCall]]:
  """The calls that touch something, with a known place and execution,
  by execution (module, run id)."""
  return _executions(c for c, t in found.items() if t.objects)


def _executions(
  calls: Iterable[SanitizedCall],
) -> dict[tuple[int, int], list[SanitizedCall]]:
  """The calls with a known place and execution, by execution (module,
  run id)."""
  runs: dict[tuple[int, int], list[SanitizedCall]] = defaultdict(list)
  unknown = callbacks.UNKNOWN_RUN
  for call in calls:
    site = call.site
    if site is not None and call.run_id != unknown:
      runs[(site.module.serial, call.run_id)].append(call)
  return runs


ONCE, OPTIONAL, MANY = "once", "optional", "many"


def _split(p: sites.CallSite, q: sites.CallSite):
  """Where two places' contexts part: (the frames both are in, p's rest,
  q's rest, whether they part into two regions of one construct)."""
  k = 0
  for x, y in zip(p.context, q.context, strict=False):
    if x != y:
      break
    k += 1
  apart = (
    k < len(p.context)
    and k < len(q.context)
    and p.context[k].construct == q.context[k].construct
  )
  return p.context[:k], p.context[k:], q.context[k:], apart


def _times(rest: tuple[sites.Frame, ...]) -> str:
  """How often a place runs per instance of the context it shares."""
  if any(f.kind == sites.LOOP for f in rest):
    return MANY
  return OPTIONAL if rest else ONCE


def pairing(
  p: sites.CallSite,
  q: sites.CallSite,
  before: list[SanitizedCall],
  after: list[SanitizedCall],
  iteration: Iteration | None = None,
) -> tuple[list[tuple[SanitizedCall, SanitizedCall]], str | None, bool]:
  """The pairs of calls of places `p` and `q` (`p` first in program
  order; `before` and `after` their calls in one execution, in order of
  start) that ran in one instance of what both are inside, and why some
  could not be paired (None: every pair that matters is here).

  * Two branches of one ``case`` never run in one instance: no pair.
  * Inside no common loop, every call of `p` comes before every call of
    `q`: each call of `q` pairs with every call of `p` that began once it
    had returned (`_every_later`), each pair a race of its own: a place
    in a loop whose calls began after a later place's call returned
    broke the program's order as often as that.
  * Inside a common loop, iterations run one after another (XLA:CPU runs
    a ``while`` body to its end before the next test), so the k-th call of
    a place that runs once an iteration is in the k-th iteration: two such
    places pair by rank. So do the calls of a module's executions that
    ran one after another in a device's stream and were not told apart
    (`callbacks.SEQUENCE_RUN`): the k-th iteration of the sequence; there,
    two places in no common loop are unpaired. A place in a branch of the
    loop pairs by rank only when it ran every iteration (as often as the
    other); else, and for a place in an inner loop, which iteration a
    call ran in is not recorded: unpaired.
  * Two places that run once an iteration of a loop both are in, and ran
    different numbers of times: XLA moved one out of the loop or merged
    its calls (a read hoisted before the loop runs once, before every
    write). Each call of the place that ran fewer times stands for
    several of the program's, which cannot all keep their order with the
    other place's calls: a ``"merged"`` race (`merged_pairs`), never
    unpaired.

  * Where the iterations are recorded (`iteration`: a call's iteration
    of a loop, from the loop's iteration markers), two places inside a
    common loop that do not both run once an iteration (one in an inner
    loop, or in a branch) pair exactly: the calls of each iteration of
    the innermost loop both are in (`by_iteration`).

  Returns the pairs, why some could not be paired, and whether the pairs
  are ``"merged"`` ones (each a race, whatever its times).
  """
  if not before or not after:
    return [], None, False
  common, rest_p, rest_q, apart = _split(p, q)
  if apart:
    frame = rest_p[0]
    if frame.kind == sites.BRANCH:
      return [], None, False
    return [], "one is in a loop's condition, the other in its body", False
  if not any(f.kind == sites.LOOP for f in common):
    if before[0].run_id == callbacks.SEQUENCE_RUN:
      return (
        [],
        (
          "their module's executions were not counted (nothing outside "
          "every loop and branch ran), so only places of one loop are "
          "compared, iteration by iteration"
        ),
        False,
      )
    return _every_later(before, after), None, False
  tp, tq = _times(rest_p), _times(rest_q)
  if (tp, tq) != (ONCE, ONCE):
    loop = [f for f in common if f.kind == sites.LOOP][-1].construct
    found = None
    if iteration is not None:
      found = by_iteration(before, after, loop, iteration)
    if found is None and MANY in (tp, tq):
      # No marker counted them: an inner loop's constant trip count does.
      trips = p.module.loop_trips
      found = by_count(
        before, after, loop, _per_run(rest_p, trips), _per_run(rest_q, trips)
      )
    if found is not None:
      return found, None, False
    if iteration is not None:
      return [], _unrecorded_iterations(before[0]), False
  if MANY in (tp, tq):
    return (
      [],
      (
        "one is in a loop inside the loop both are in: which of its calls "
        "ran in which iteration is not recorded, and the inner loop's trip "
        "count is not a constant of the program (or its calls did not run "
        "as often as it says)"
      ),
      False,
    )
  if len(before) == len(after):
    return list(zip(before, after, strict=True)), None, False
  if tp == ONCE and tq == ONCE:
    return merged_pairs(before, after), None, True
  return (
    [],
    (
      "one is in a branch inside a loop and did not run every iteration: "
      "which iteration each call ran in is not recorded"
    ),
    False,
  )


def _every_later(
  before: list[SanitizedCall], after: list[SanitizedCall]
) -> list[tuple[SanitizedCall, SanitizedCall]]:
  """The pairs of a call of `before` (in order of start) and a call of
  `after` that had returned before it began: the program makes every
  call of `before` first, so each such pair broke its order. Pairing
  each call of `after` with the latest-starting call of `before` alone
  would find that one pair and miss the others (a loop's calls, some of
  which began after the later place's call returned)."""
  starts = [a.start_ns for a in before]
  return [
    (a, b)
    for b in after
    for a in before[bisect.bisect_left(starts, b.end_ns) :]
  ]


Iteration = Callable[[SanitizedCall, int], "int | None"]
"""A call's iteration of a loop of its module (`sites.Frame.construct`),
counted over its execution, or None where it was not recorded
(`columns.NativeColumns.iteration`)."""


def _per_run(
  rest: tuple[sites.Frame, ...], trips: dict[int, int]
) -> int | None:
  """How many times a place inside the loops `rest` (inner to a loop both
  places are in) runs per iteration of that loop, where each loop's trip
  count is a constant of the program; None where a loop's is not, or the
  place is in a branch (which may not run)."""
  count = 1
  for frame in rest:
    if frame.kind != sites.LOOP or frame.construct not in trips:
      return None
    # A loop's condition runs once more than its body.
    count *= trips[frame.construct] + (frame.region == 0)
  return count


def by_count(
  before: list[SanitizedCall],
  after: list[SanitizedCall],
  loop: int,
  per_before: int | None,
  per_after: int | None,
) -> list[tuple[SanitizedCall, SanitizedCall]] | None:
  """`by_iteration` where no marker counted the iterations of `loop`: the
  k-th call of a place that runs `per_before` (`per_after`) times an
  iteration, in order of start, ran in iteration ``k // per_before``. None
  where a count is unknown, or the calls did not run as often as the
  counts say (XLA moved or merged some)."""
  if not per_before or not per_after:
    return None
  runs, rest = divmod(len(before), per_before)
  if rest or divmod(len(after), per_after) != (runs, 0):
    return None
  table = {id(c): k // per_before for k, c in enumerate(before)}
  table.update({id(c): k // per_after for k, c in enumerate(after)})
  return by_iteration(before, after, loop, lambda call, _: table[id(call)])


def _unrecorded_iterations(call: SanitizedCall) -> str:
  """Why the iterations of a loop `call`'s place is in were not recorded:
  its module got no iteration markers (they are native calls, placed only
  where the module runs on one CPU device), or XLA dropped them."""
  module = call.site.module if call.site is not None else None
  head = "which iteration of the loop both are in each call ran in was not "
  if module is not None and not module.iteration_markers:
    return (
      head + "recorded: loops get iteration markers only in a module that "
      f"runs on one CPU device, and this one runs on {module.platform}"
      + ("" if module.one_device else " over several devices")
    )
  return (
    head + "recorded (the loop's iteration marker did not run: XLA removed "
    "or unrolled the loop)"
  )


def by_iteration(
  before: list[SanitizedCall],
  after: list[SanitizedCall],
  loop: int,
  iteration: Iteration,
) -> list[tuple[SanitizedCall, SanitizedCall]] | None:
  """The pairs of calls of two places (`before`: the place the program
  makes first, `after` the other's, each in order of start) that ran in
  one iteration of `loop`, the innermost loop both are in, and broke the
  program's order: in one iteration the program makes every call of the
  first place before every call of the second (the first place, or the
  inner loop or branch it is in, comes first in the loop's body). So each
  pair is a call of the second place that returned before a call of the
  first began. None where a call's iteration was not recorded."""
  groups: dict[int, list[SanitizedCall]] = defaultdict(list)
  for a in before:
    k = iteration(a, loop)
    if k is None:
      return None
    groups[k].append(a)
  starts = {k: sorted(calls, key=_start) for k, calls in groups.items()}
  keys = {k: [c.start_ns for c in calls] for k, calls in starts.items()}
  out = []
  for b in after:
    k = iteration(b, loop)
    if k is None:
      return None
    calls = starts.get(k)
    if not calls:
      continue
    # The first place's calls that began once `b` had returned.
    for a in calls[bisect.bisect_left(keys[k], b.end_ns) :]:
      out.append((a, b))
  return out


def merged_pairs(
  before: list[SanitizedCall], after: list[SanitizedCall]
) -> list[tuple[SanitizedCall, SanitizedCall]]:
  """For two places that run once an iteration of one loop and ran
  different numbers of times (`before`: the calls of the place the
  program makes first, `after` the other's, each in order of start), one
  pair for each call of the place that ran fewer times, with the call of
  the other it breaks the program's order with most plainly.

  A call that stands for several iterations' calls must come after the
  other place's call of the first of them and before that of the last,
  as the program made them. So a later place's call is paired with the
  first call of the earlier place that began after it returned (the
  program made that one first), else with the earlier place's last call
  (it ran after every one, though some iteration's call of it comes
  before the next iteration's); an earlier place's call with the last
  call of the later place that had returned before it began, else with
  the later place's first call.
  """
  out = []
  if len(after) < len(before):
    starts = [a.start_ns for a in before]
    for x in after:
      k = bisect.bisect_left(starts, x.end_ns)
      out.append((before[k] if k < len(before) else before[-1], x))
  else:
    by_end = sorted(after, key=lambda c: c.end_ns)
    ends = [b.end_ns for b in by_end]
    for x in before:
      k = bisect.bisect_right(ends, x.start_ns)
      out.append((x, by_end[k - 1] if k else after[0]))
  return out


def _by_object(
  found: dict[SanitizedCall, Touch],
) -> dict[SanitizedObject, list[SanitizedCall]]:
  """The calls on each object named by a value."""
  objects: dict[SanitizedObject, list[SanitizedCall]] = defaultdict(list)
  for call, touch in found.items():
    for obj in touch.objects:
      if not obj.anything:
        objects[obj].append(call)
  return objects


def _writes(
  found: dict[SanitizedCall, Touch], a: SanitizedCall, b: SanitizedCall
) -> bool:
  return conflict_rule.modes_conflict(found[a].mode, found[b].mode)


def _site_pairs(
  at: dict[sites.CallSite, list[SanitizedCall]],
  found: dict[SanitizedCall, Touch],
) -> set[tuple[sites.CallSite, sites.CallSite]]:
  """The pairs of places whose calls may conflict (one writes, and they
  may share an object), in program order."""
  by_object: dict[SanitizedObject, set[sites.CallSite]] = defaultdict(set)
  anything: set[sites.CallSite] = set()
  for site, calls in at.items():
    distinct = {id(t): t for t in map(found.__getitem__, calls)}
    for touch in distinct.values():
      for obj in touch.objects:
        (anything if obj.anything else by_object[obj]).add(site)
  groups = [*by_object.values()]
  out: set[tuple[sites.CallSite, sites.CallSite]] = set()
  every = set(at)
  for s in anything:
    for t in every:
      if s is not t:
        out.add((s, t) if s.position < t.position else (t, s))
  for group in groups:
    for s, t in itertools.combinations(sorted(group, key=_position), 2):
      out.add((s, t))
  return out


def _position(site: sites.CallSite) -> int:
  return site.position


def _by_site(
  run: list[SanitizedCall],
) -> dict[sites.CallSite, list[SanitizedCall]]:
  """The calls of one execution by their place (`_executions` keeps only
  placed calls)."""
  at: dict[sites.CallSite, list[SanitizedCall]] = defaultdict(list)
  for call in run:
    site = call.site
    assert site is not None
    at[site].append(call)
  return at


def _runs_by_site(
  found: dict[SanitizedCall, Touch],
  runs: dict[tuple[int, int], list[SanitizedCall]] | None,
) -> Iterator[dict[sites.CallSite, list[SanitizedCall]]]:
  """Each execution's calls by place (`_by_site`), where it has two places
  or more; the executions are those of the calls in `found` that touch an
  object unless `runs` gives them."""
  if runs is None:
    runs = _executions(c for c, t in found.items() if t.objects)
  for run in runs.values():
    at = _by_site(run)
    if len(at) >= 2:
      yield at


def out_of_order(
  found: dict[SanitizedCall, Touch],
  unpaired: list[Unpaired] | None = None,
  runs: dict[tuple[int, int], list[SanitizedCall]] | None = None,
  iteration: Iteration | None = None,
) -> Iterator[SanitizerRace]:
  """Pairs on one object, one writing, that in one execution ran in
  another order than the program's, paired by `pairing`, and the pairs
  of places that ran fewer times than the program makes them
  (``"merged"``); the pairs of places it could not pair go to `unpaired`
  (one each, calls summed)."""
  left: dict[tuple[int, int], tuple] = {}
  for at in _runs_by_site(found, runs):
    for calls in at.values():
      calls.sort(key=_start)
    for p, q in sorted(
      _site_pairs(at, found), key=lambda s: (s[0].position, s[1].position)
    ):
      pairs, why, merged = pairing(p, q, at[p], at[q], iteration)
      if merged:
        counts = (len(at[p]), len(at[q]))
        for a, b in pairs:
          for obj in _conflicts(found[a], found[b]):
            yield SanitizerRace(MERGED, a, b, obj, runs=counts)
        continue
      if why is not None:
        key = (p.number, q.number)
        if key not in left:
          left[key] = (p, q, why, set())
        left[key][3].update(at[p], at[q])
        continue
      for a, b in pairs:
        if b.end_ns <= a.start_ns:
          for obj in _conflicts(found[a], found[b]):
            yield SanitizerRace(OUT_OF_ORDER, a, b, obj)
  if unpaired is not None:
    unpaired.extend(
      Unpaired(p, q, why, len(m), frozenset(m))
      for p, q, why, m in left.values()
    )


def interleaved(
  found: dict[SanitizedCall, Touch],
  runs: dict[tuple[int, int], list[SanitizedCall]] | None = None,
) -> Iterator[SanitizerRace]:
  """Writes of another execution that may have landed between two calls
  of one execution on one object (`gaps.in_gap`: begun between them, or
  still running when the first began, whose effect the records cannot
  place before it; such a write overlapping a call is an overlap too).
  Executions that ran one after the other, or whose calls on the object
  did not interleave, give none. Per object, one sweep over its calls in
  order of start: between two calls of one execution next in that
  execution, the calls in between and those still running when the
  first began are looked at (O(n log n), and what lies in between)."""
  if runs is None:
    runs = _executions(c for c, t in found.items() if t.objects)
  if len(runs) < 2:
    return
  key_of: dict[SanitizedCall, tuple[int, int]] = {}
  for key, run in runs.items():
    for call in run:
      key_of[call] = key
  by_object: dict[SanitizedObject, list[SanitizedCall]] = defaultdict(list)
  anything: list[SanitizedCall] = []
  for call in key_of:
    for obj in found[call].objects:
      (anything if obj.anything else by_object[obj]).append(call)
  if anything:
    if not by_object:
      by_object[found[anything[0]].objects[0]] = []
    for calls in by_object.values():
      calls.extend(anything)
  for obj, calls in by_object.items():
    calls = sorted(set(calls) if anything else calls, key=_start)
    reached, span = gaps.reach(calls), None
    last: dict[tuple[int, int], int] = {}
    for j, b in enumerate(calls):
      key = key_of[b]
      if key[1] == callbacks.SEQUENCE_RUN:
        continue  # Several executions: between its calls, anything ran.
      i = last.get(key)
      last[key] = j
      if i is None or (
        j - i < 2 and (i == 0 or reached[i - 1] <= calls[i].start_ns)
      ):
        continue  # Nothing began between the two, nor ran on into the first.
      a = calls[i]
      if b.start_ns < a.end_ns:
        continue
      span = gaps.longest(calls) if span is None else span
      for k in gaps.in_gap(calls, i, j, span):
        w = calls[k]
        if key_of[w] == key:
          continue
        tw = found[w]
        if tw.mode != "write":
          continue
        if _conflicts(found[a], tw) or _conflicts(tw, found[b]):
          yield SanitizerRace(INTERLEAVED, a, w, obj, then=b)


def _start(call: SanitizedCall) -> int:
  return call.start_ns


def races(
  found: dict[SanitizedCall, Touch],
  unpaired: list[Unpaired] | None = None,
  runs: dict[tuple[int, int], list[SanitizedCall]] | None = None,
  ordered: dict[tuple[int, int], list[SanitizedCall]] | None = None,
  iteration: Iteration | None = None,
) -> list[SanitizerRace]:
  """Every race: the overlaps, the calls out of order, then the
  interleaved writes (`runs`: `executions`, when made already; `ordered`:
  those of them the order check must see, when not all; `iteration`:
  the calls' loop iterations, where recorded: `pairing`)."""
  if runs is None:
    runs = _executions(c for c, t in found.items() if t.objects)
  return [
    *overlaps(found),
    *out_of_order(
      found, unpaired, runs if ordered is None else ordered, iteration
    ),
    *interleaved(found, runs),
  ]


def repeated_handles(
  call: SanitizedCall, touch: Touch, declarations: Declarations
) -> list[int]:
  """The values `call`'s object operand held more than once, where its
  declaration says its elements are different objects (else none)."""
  del declarations  # The footprint carries what they decide.
  found = touch.footprint
  if (
    not found.declared_object
    or not found.distinct_elements
    or found.operand is None
  ):
    return []
  values = call.values_of(found.operand) or ()
  return sorted({v for v in values if values.count(v) > 1})


def contradictions(
  found: dict[SanitizedCall, Touch],
  declarations: Declarations,
  distinct_by_analysis=None,
  runs: dict[tuple[int, int], list[SanitizedCall]] | None = None,
) -> list[Contradiction]:
  """Calls declared distinct that named one object (see the module).

  `distinct_by_analysis(a, b)`: why the static check, reading the
  declarations and ``Resource`` names, takes the two calls for different
  objects, in words, or None when it does not (the argument None: only
  safe pairs and repeated handles in one call are checked).
  """
  out: list[Contradiction] = []
  for call, touch in found.items():
    d = touch.declaration
    if d is None:
      continue
    for value in repeated_handles(call, touch, declarations):
      out.append(
        Contradiction(
          call,
          call,
          SanitizedObject(call.family, value),
          f"{d} says different elements of operand "
          f"{touch.footprint.operand} are different objects",
        )
      )
  for at in _runs_by_site(found, runs):
    # One call of each place stands for the place on each object: what is
    # checked depends on the two places, not on which of their calls.
    first_of: dict[SanitizedObject, dict[sites.CallSite, SanitizedCall]] = (
      defaultdict(dict)
    )
    for site, calls in at.items():
      seen_touches: set[int] = set()
      for call in calls:
        touch = found[call]
        if id(touch) in seen_touches:
          continue
        seen_touches.add(id(touch))
        for obj in touch.objects:
          if not obj.anything:
            first_of[obj].setdefault(site, call)
    for obj, places in first_of.items():
      if len(places) < 2:
        continue
      for a, b in itertools.combinations(places.values(), 2):
        if not _writes(found, a, b):
          continue
        pair = access_policy.safe_pair(declarations, a.target, b.target)
        if pair is not None:
          out.append(
            Contradiction(
              a,
              b,
              obj,
              f"the safe pair {reason_words.safe_pair_named(pair, quote='')} "
              "says their calls never conflict",
            )
          )
        elif distinct_by_analysis is not None and (
          why := distinct_by_analysis(a, b)
        ):
          out.append(Contradiction(a, b, obj, why))
  return out
