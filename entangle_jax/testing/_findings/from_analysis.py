"""The findings of an analysis: the one module that reads `Op`, `Race` and
the user's source lines, and turns them into plain records
(`entangle_jax.testing._findings.records`) that every emitter reads.

* `cause_of`: why a pair is reported (a `Cause` with its stable code,
  `causes.CAUSES`) and what fixes it; `program_order_fix`: how
  ``in_program_order`` fixes a group's pairs, when it does.
* `findings_of`: the pairs of one module grouped by cause, real hazards
  first, each `Group` with its findings (pairs of the same two targets on
  the same two user lines), its undeclared targets; and the declarations
  that decided the answer.
* `module_result`: one checked module file and its findings.
* `call_site` / `pairs_of`: calls and pairs as records, each object named
  by a label that is stable within the module (`ObjectLabels`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from entangle_jax._src import reason_words
from entangle_jax._src.conflict_rule import Reason, Verdict
from entangle_jax._src.reason_words import Words
from entangle_jax._src.targets import names, shipped
from entangle_jax.testing._analysis import source_lines
from entangle_jax.testing._analysis.ops import Op, Race
from entangle_jax.testing._analysis.order_analysis import LeftOut
from entangle_jax.testing._findings import causes
from entangle_jax.testing._findings.platforms import Platform
from entangle_jax.testing._findings.records import (
  Cause,
  Finding,
  Findings,
  Group,
  ModuleResult,
  ObjectSeen,
  Pair,
  ReportedCall,
  SafeCount,
)
from entangle_jax.testing._order.access import Access
from entangle_jax.testing._order.objects import ObjectRef


def _cause(words: Words, headline: str, steps: tuple[str, ...]) -> Cause:
  """A cause of `words`' code, with its headline and steps filled in."""
  assert words.code is not None, "a reason that clears a pair is no cause"
  return Cause(words.code, words.rank, headline, steps)


def cause_of(race: Race) -> Cause:
  """The most likely reason `race` is reported: for a race that XLA's
  optimizer hid (`Race.xla_change`), what XLA did, then the reason the
  pair conflicts and its fix."""
  change = race.xla_change
  if change is None:
    return _cause_in_module(race)
  base = _cause_in_module(
    Race(race.first, race.second, order_known=race.order_known)
  )
  steps = base.steps
  if change.kind == "hoisted":
    steps = (*steps, reason_words.HOISTED_STEP)
  elif change.kind == "deleted" and not change.seen:
    steps = (*steps, reason_words.DELETED_STEP)
  elif change.call is not None:
    steps = (*steps, causes.SIDE_EFFECT_NOTE)
  words = reason_words.HIDDEN_BY_XLA
  hidden = _cause(
    words,
    words.headline_with(change=change.sentence(), headline=base.headline),
    steps,
  )
  # Two Resources on one handle (rank 0) stay what in_program_order
  # cannot fix (`program_order_fix`).
  return dataclasses.replace(hidden, rank=min(hidden.rank, base.rank))


_MOST_TELLING = (
  Reason.SAME_OBJECT,
  Reason.UNDECLARED,
  Reason.NO_OBJECT,
  Reason.ELEMENTS_NOT_DISTINCT,
  Reason.HANDLES_MAY_BE_ONE,
)
"""The reasons that make two calls conflict, the one a report gives first
where a pair's accesses conflict for several."""


def _deciding_verdict(race: Race) -> Verdict | None:
  """The verdict that says why `race`'s calls conflict: of the one rule's
  verdicts on their accesses that conflict, the first of the most telling
  reason (`_MOST_TELLING`); None where none conflicts."""
  conflicting = [v for v in race.verdicts if v.conflict]
  if not conflicting:
    return None
  return min(conflicting, key=lambda v: _MOST_TELLING.index(v.reason))


def _communicates(op: Op) -> bool:
  """Whether `op` talks to other processes (its footprint's
  ``communicates``)."""
  return op.footprint is not None and op.footprint.communicates is not None


def _cause_in_module(race: Race) -> Cause:
  """Why `race`, a pair of one module, is reported: its verdict's reason
  (`_deciding_verdict`) and that reason's words
  (`reason_words.BY_REASON`), where the pair says no more. What only the
  pair says: two calls on two devices (`reason_words.ACROSS_DEVICES`);
  two calls that both communicate (`reason_words.COMMUNICATION`);
  one object under two ``Resource`` names (`reason_words.TWO_NAMES`); a
  call of a backward pass, unless the two are one object
  (`reason_words.BACKWARD`); a call made by a binding or through a
  ``Resource``, whose fix takes one more step; and the calls themselves,
  which the fix of two calls on one object names (`_order_fix`)."""
  if race.across_devices:
    words = reason_words.ACROSS_DEVICES
    steps = (*words.steps, reason_words.PROCESSES_STEP)
    return _cause(words, words.headline_with(), steps)
  if _communicates(race.first) and _communicates(race.second):
    words = reason_words.COMMUNICATION
    return _cause(words, words.headline_with(), words.steps)
  verdict = _deciding_verdict(race)
  # No verdict conflicts: nothing tells more than the least telling.
  reason = Reason.HANDLES_MAY_BE_ONE if verdict is None else verdict.reason
  if reason is Reason.SAME_OBJECT:
    assert verdict is not None
    one, two = verdict.evidence.names
    if one and two and one != two:
      words = reason_words.TWO_NAMES
      names = reason_words.two_names((one, two))
      return _cause(words, words.headline_with(**names), words.steps)
  elif race.first.backward or race.second.backward:
    words = reason_words.BACKWARD
    return _cause(words, words.headline_with(), words.steps)
  words = reason_words.BY_REASON[reason]
  if reason in (Reason.SAME_OBJECT, Reason.NO_OBJECT):
    # One object: the fix orders the two, naming them.
    return _cause(words, words.headline_with(), _order_fix(race))
  through_resource = any(
    op.scope != op.user_scope for op in (race.first, race.second)
  )
  steps = words.steps_with(
    names=reason_words.RESOURCE_NAMES_STEP if through_resource else ""
  )
  if reason is Reason.UNDECLARED:
    if through_resource:
      steps = (causes.RESOURCE_NAME_STEP, *steps)
    if any(
      op.binding_location is not None and op.declaration is None
      for op in (race.first, race.second)
    ):
      steps = (causes.TABLE_FIRST, *steps)
  return _cause(words, words.headline_with(), steps)


def _holds_an_array(shape: str) -> bool:
  """Whether a result of this shape (an array, or a tuple of them) holds an
  array with elements, which a later call can be made to wait for."""
  for kind, dims in _ARRAYS.findall(shape):
    if kind == "token":
      continue
    if "0" not in (d.strip().lstrip("<=") for d in dims.split(",")):
      return True
  return False


_ARRAYS = re.compile(r"\b([a-z]+[0-9a-z]*)\[([^\]]*)\]")


def _can_be_waited_for(op: Op) -> bool:
  """Whether a later call can be made to wait for `op` through a result:
  one that holds an array with elements, or a JAX token that a binding's
  own call returns (``entangle(x, token)`` takes it). A host callback's
  token is JAX's, threaded for its ordered effect, which the program never
  sees as a value."""
  if _holds_an_array(op.instruction.shape):
    return True
  return (
    "token[" in op.instruction.shape
    and op.target is not None
    and not names.is_host_callback(op.target)
  )


def _name(op: Op) -> str:
  return op.target or op.instruction.opcode


def _handed_back(op: Op) -> int | None:
  """The result of `op` that hands back the object it touched, if its
  declaration says so."""
  found = op.footprint
  if found is not None and found.declared_object and found.returns_object:
    return found.returns_object[0]
  return None


def _object_operand(op: Op) -> int | None:
  """The operand of `op` that names its object, as the one access policy
  says: declared, or a Resource's token (operand 0)."""
  return None if op.footprint is None else op.footprint.operand


def _order_fix(race: Race) -> tuple[str, ...]:
  """The fix for two calls on one object, in the order the program made
  them (`race.first` first), naming what the later call must consume: the
  Python argument that carries the object where its declaration names it,
  else the operand."""
  first, second = race.first, race.second
  argument = None if second.footprint is None else second.footprint.argument
  operand = _object_operand(second)
  if not race.order_known:
    # Which came first is not known: name no call as the later one.
    return (
      f"one of these calls (`{_name(first)}`, `{_name(second)}`) must run "
      "after the other, in the order your program makes them; the module "
      "does not say which came first (XLA's instruction numbers and the "
      "Python lines disagree, or neither says). Make the later one consume "
      "a value computed from the earlier one's result (`handle = "
      "entangle(handle, r)` with `r` a result of the earlier call, then "
      "pass `handle` to the later call).",
    )
  fix = (
    f"the later call (`{_name(second)}`) must run after the earlier one "
    f"(`{_name(first)}`, listed first), as the program made them: "
  )
  returned = _handed_back(first)
  if not _can_be_waited_for(first):
    # Nothing to entangle with: the usual fix names a result it lacks.
    fix += (
      "the earlier call returns no array, so nothing can be made to wait "
      "for it: give it a result (an `io_callback` with a `result_shape` "
      "in place of a `jax.debug.callback`; an `ffi_call` result), then "
      "make the later call consume it (`x = entangle(x, r)` with `x` an "
      "array with elements that the later call takes and `r` that result)."
    )
  elif not second.operand_elements:
    fix += _carrier_fix(second)
  elif argument is not None:
    into = f"argument {argument}"
    if returned is not None:
      fix += (
        f"pass as {into} the object the earlier call hands back (its "
        f"result {returned}), or the handle entangled with it."
      )
    else:
      fix += (
        f"pass as {into} the array that holds the handle, entangled with "
        "a result of the earlier call (`entangle(handle, r)`: `handle` an "
        "array, `r` that result)."
      )
  else:
    into = (
      f"the later call's operand {operand}"
      if operand is not None
      else "an operand of the later call"
    )
    if returned is not None:
      fix += (
        f"pass as {into} the object the earlier call hands back (its "
        f"result {returned}) in place of the handle it was given, or that "
        "handle entangled with it (`handle = entangle(handle, r)` with `r` "
        "that result)."
      )
    elif operand is None:
      # No operand names its object (it touches its whole library): any
      # operand the call takes orders it.
      fix += (
        f"make {into} consume a value computed from the earlier call's "
        "result (`x = entangle(x, r)` with `x` an array the later call "
        "takes and `r` a result of the earlier call, then pass `x` to the "
        "later call)."
      )
    else:
      fix += (
        f"make {into} consume a value computed from the earlier call's "
        "result (`handle = entangle(handle, r)` with `r` a result of the "
        "earlier call, then pass `handle` to the later call)."
      )
  steps = [fix]
  if any(op.scope != op.user_scope for op in (first, second)):
    steps.append(
      "Where one of them is made through a Resource, make the other "
      "through it too (res.read / res.write), or pass it res.token."
    )
  return tuple(steps)


def _carrier_fix(later: Op) -> str:
  """The fix for a later call whose operands hold no element (or that
  takes none): an entangle on such an operand orders nothing, since XLA
  replaces a value of no element by a constant that depends on nothing."""
  fix = (
    "its operands hold no element, and an `entangle` on such an operand "
    "orders nothing (XLA replaces a value of no element by a constant): "
    "give the later call one more operand with an element, computed from "
    "the earlier call's result (`c = entangle(jnp.zeros(()), r)` with `r` "
    "that result), and pass it `c`"
  )
  if _carried_by_transform(later):
    return fix + (
      ", as an argument its Python function takes and ignores (`lambda "
      "*a: f(*a[:-1])` around your function `f`)."
    )
  return fix + "."


_CARRIED_CALLBACKS = ("io_callback", "debug_callback")
"""The host callbacks ``in_program_order`` gives one more operand (its
Python function does not see it) where theirs hold no element, and gives
a result where they return none (``io_callback`` only: a
``jax.debug.callback`` has no results)."""


def _primitive(op: Op) -> str:
  """The JAX primitive that made `op`: the last component of its scope."""
  return op.user_scope.rsplit("/", 1)[-1]


def _carried_by_transform(op: Op) -> bool:
  """Whether ``in_program_order`` orders `op` through an operand it adds
  when the op has none with an element (`_CARRIED_CALLBACKS`)."""
  return (
    op.target is not None
    and names.is_host_callback(op.target)
    and _primitive(op) in _CARRIED_CALLBACKS
  )


def _waited_for_by_transform(op: Op) -> bool:
  """Whether ``in_program_order`` can make later calls wait for `op`: it
  returns an array or a binding's token (`_can_be_waited_for`), or is an
  ``io_callback``, which the transform gives a result when it returns
  none."""
  if _can_be_waited_for(op):
    return True
  return (
    op.target is not None
    and names.is_host_callback(op.target)
    and _primitive(op) == "io_callback"
  )


_JITTED = re.compile(r"jit\(([^()/]+)\)(?:/|$)")
# Scopes whose jitted function is not one the user can wrap: a module
# deserialized from jax.export (in_program_order cannot see inside it), and
# pmap, which JAX traces as a shard_map of its own `_fun`.
_NOT_THE_USERS = re.compile(
  r"(?:^|/)call_exported(?:/|$)|^jit\(_fun\)/shard_map"
)
_GRADIENT = re.compile(r"(?:^|/|\()(?:jvp|transpose)\(")


def _jitted_function(op: Op) -> str | None:
  """The name of the function ``jax.jit`` made the op's module from: the
  first component of its ``op_name`` (``jit(step)/...``), or None when
  the op was not traced under ``jax.jit`` (a hand-written module), or
  its function is not the user's (pmap's, or one calling a module
  deserialized from ``jax.export``)."""
  found = _JITTED.match(op.user_scope)
  if found is None or _NOT_THE_USERS.search(op.user_scope):
    return None
  return found.group(1)


def from_gradient(ops: Iterable[Op]) -> bool:
  """Whether `ops` came from a gradient: JAX wraps the scopes of a
  gradient's ops in ``jvp(...)`` (forward) and ``transpose(...)``
  (backward)."""
  return any(_GRADIENT.search(op.user_scope) for op in ops)


def program_order_fix(
  races: Sequence[Race], cause: Cause, gradient: bool = False
) -> str | None:
  """How ``in_program_order`` fixes every pair of `races` (one cause's),
  when it does: both calls of each pair declared, on one device, made by
  the one function ``jax.jit`` compiled into the module, the earlier call
  returning an array to order the later one after. None otherwise: pairs
  across devices (nothing in one module orders devices), two Resources on
  one handle (in_program_order, as the race check, reads their names as
  two objects), calls nothing declares (declare them first), an earlier
  call that returns nothing (``jax.debug.callback``: nothing can wait for
  it; an ``io_callback`` the transform gives a result), a module not made
  by ``jax.jit``, or a later call with no operand that holds an element
  (nothing to entangle it by, since XLA replaces a value of no element by
  a constant: the transform raises, naming it; a host callback it gives
  one more operand, which its Python function does not see). With
  `gradient` (the module came from a gradient), it says how to wrap one.

  The answer reads the module only, so it is the same in every process.
  A binding's own primitive whose custom call takes only operands its
  lowering makes (no input of the primitive to entangle) is offered the
  transform too: nothing in the module tells such an operand from a
  constant input (XLA gives constants no metadata), and the transform
  raises for that call, naming it and the primitive."""
  if cause.rank == 0 or not races:
    return None
  names = set()
  for race in races:
    first, second = race.first, race.second
    if race.across_devices:
      return None
    if first.declaration is None or second.declaration is None:
      return None
    # Nothing to entangle: an operand of no element orders nothing.
    if not second.operand_elements and not _carried_by_transform(second):
      return None
    if not _waited_for_by_transform(first):  # Nothing to wait for.
      return None
    names |= {_jitted_function(first), _jitted_function(second)}
  if len(names) != 1 or None in names:
    return None
  (name,) = names
  fix = (
    f"Or order every native call of `{name}`, the function jitted into "
    "this module, as its program makes them: "
    f"`jax.jit(entangle_jax.in_program_order({name}))` in place of "
    f"`jax.jit({name})`, which adds the entangle calls these declarations "
    "call for."
  )
  if gradient:
    fix += (
      " Wrap what you pass to jax.jit: a gradient's module is named for "
      f"its function too, and `jax.jit(jax.grad({name}))` becomes "
      f"`jax.jit(entangle_jax.in_program_order(jax.grad({name})))`."
    )
  return fix


class ObjectLabels:
  """Labels for the objects of one module, stable from run to run: an
  argument or value keeps its name; a handle baked into the module as a
  constant (its value a new address each run) is ``handle #N (a
  constant)``, numbered in the order the report meets them."""

  def __init__(self):
    self._constants: dict[object, int] = {}

  def label(self, ref: ObjectRef) -> str:
    if ref.root[0] != "constant":
      return f"object {ref}"
    number = self._constants.setdefault(ref.root, len(self._constants) + 1)
    element = "" if ref.element is None else f"[{ref.element}]"
    return f"handle #{number}{element} (a constant)"


def _access_text(access: Access, labels: ObjectLabels) -> tuple[str, str]:
  """What one access says, and the label of its object ('' for none)."""
  verb = "reads" if access.mode == "read" else "writes"
  if access.resource is None and access.object is None:
    return f"{verb} any resource", ""
  parts = [] if access.resource is None else [repr(access.resource)]
  label = ""
  if access.object is not None:
    label = labels.label(access.object)
    parts.append(label)
  return f"{verb} {', '.join(parts)}", label


def call_site(op: Op, labels: ObjectLabels | None = None) -> ReportedCall:
  """`op` as a record, its objects named by `labels` (the module's)."""
  labels = labels or ObjectLabels()
  texts, objects = [], []
  for access in op.accesses:
    text, label = _access_text(access, labels)
    texts.append(text)
    if access.object is not None:
      objects.append(ObjectSeen(label, str(access.object)))
  user, binding = source_lines.lines(op.instruction.stack)
  return ReportedCall(
    instruction=op.name,
    target=op.target,
    opcode=op.instruction.opcode,
    access="; ".join(texts),
    objects=tuple(dict.fromkeys(objects)),
    scope=op.user_scope,
    path=None if user is None else source_lines.shown_file(user[0]),
    line=None if user is None else user[1],
    binding_path=None
    if binding is None
    else source_lines.shown_file(binding[0]),
    binding_line=None if binding is None else binding[1],
    backward=op.backward,
  )


class _Sites:
  """Each op's record, made once (a module's million pairs share a few
  hundred calls), with one module's labels."""

  def __init__(self):
    self.labels = ObjectLabels()
    self._made: dict[tuple[Op, object], ReportedCall] = {}

  def __call__(self, op: Op) -> ReportedCall:
    # Keyed by the stack too: one call of a jitted helper at two places is
    # one op with two stacks, each place's (`xla_changes.hidden_races`).
    key = (op, op.instruction.stack)
    site = self._made.get(key)
    if site is None:
      site = self._made[key] = call_site(op, self.labels)
    return site

  def pair(self, race: Race) -> Pair:
    return Pair(self(race.first), self(race.second), race.across_devices)


def pairs_of(races: Sequence[Race]) -> tuple[Pair, ...]:
  """`races` as records, with one set of labels."""
  sites = _Sites()
  return tuple(sites.pair(race) for race in races)


def call_sites(ops: Sequence[Op]) -> tuple[ReportedCall, ...]:
  """`ops` as records, with one set of labels."""
  sites = _Sites()
  return tuple(sites(op) for op in ops)


def findings_of(
  races: Sequence[Race], left_out: Sequence[LeftOut] = ()
) -> Findings:
  """`races` grouped by cause, each group's findings and undeclared
  targets, the declarations applied, and what declared safe pairs left
  out (`left_out`: from ``races``' answer or `safe_pairs_left_out`)."""
  sites = _Sites()
  pairs = {id(race): sites.pair(race) for race in races}
  members: dict[Cause, list[Race]] = {}
  causes_by_kind: dict[tuple, Cause] = {}
  for race in races:
    # A cause depends only on this much of a pair: work it out once per
    # kind of pair, not once for each of a million pairs.
    kind = (
      _kind(race.first),
      _kind(race.second),
      race.across_devices,
      race.xla_change,
    )
    cause = causes_by_kind.get(kind)
    if cause is None:
      cause = causes_by_kind[kind] = cause_of(race)
    members.setdefault(cause, []).append(race)
  gradient = from_gradient(
    {op for race in races for op in (race.first, race.second)}
  )
  groups = []
  for cause in sorted(members, key=lambda c: c.rank):
    alike: dict[tuple, list[Race]] = {}
    for race in members[cause]:
      alike.setdefault(_where(race), []).append(race)
    undeclared = _undeclared(members[cause])
    notes = (shipped.note_for(t) for t in undeclared)
    program_order = program_order_fix(members[cause], cause, gradient)
    steps = (
      cause.steps if program_order is None else (*cause.steps, program_order)
    )
    entries = tuple(
      Finding(tuple(pairs[id(r)] for r in same), cause, steps)
      for same in alike.values()
    )
    groups.append(
      Group(
        cause,
        entries,
        undeclared,
        tuple(dict.fromkeys(n for n in notes if n)),
        program_order,
      )
    )
  applied = _declarations_of([*races, *(item.race for item in left_out)])
  by_safe: dict = {}
  for item in left_out:
    by_safe.setdefault(item.pair, []).append(sites.pair(item.race))
  return Findings(
    tuple(pairs[id(race)] for race in races),
    tuple(groups),
    applied,
    tuple(SafeCount(p, tuple(r)) for p, r in by_safe.items()),
    gradient,
  )


def _where(race: Race) -> tuple:
  """The two targets and the two user lines of `race`, unordered."""
  ends = sorted(
    (op.target or "", op.location or "") for op in (race.first, race.second)
  )
  return (*ends, race.across_devices)


def _kind(op: Op) -> tuple:
  """What `cause_of` reads of `op`."""
  return (
    op.accesses,
    op.backward,
    op.scope != op.user_scope,
    op.target,
    op.declaration,
    op.binding_location is not None,
  )


def _undeclared(races: Sequence[Race]) -> tuple[str, ...]:
  return tuple(
    sorted(
      {
        op.target
        for race in races
        for op in (race.first, race.second)
        if op.target
        and op.declaration is None
        and any(a.resource is None and a.object is None for a in op.accesses)
      }
    )
  )


def _declarations_of(races: Sequence[Race]) -> tuple[str, ...]:
  found = (op.declaration for race in races for op in (race.first, race.second))
  return tuple(str(d) for d in dict.fromkeys(d for d in found if d is not None))


def module_result(
  path: str,
  module: str,
  platform: Platform | None,
  native_calls: int = 0,
  races: Sequence[Race] = (),
  left_out: Sequence[LeftOut] = (),
  declared: tuple[str, ...] = (),
  unseen: str | None = None,
) -> ModuleResult:
  """One checked module's result, its races made records
  (`findings_of`)."""
  return ModuleResult(
    path,
    module,
    platform,
    native_calls,
    findings_of(races, left_out),
    declared=declared,
    unseen=unseen,
  )
