"""Which execution each host callback of a loop or a branch ran in.

A host callback's record carries no execution id where its module got no
execution op (a TPU module, or one whose callbacks are all in loops or
branches): its calls are placed in an execution only where the records
leave one choice (`place_host_calls`), and otherwise said, with why
(`unplaced_reason`), never guessed. The race rules (`checks`) then pair
them as native calls.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Collection

from entangle_jax._src.targets import platforms
from entangle_jax.testing._sanitize import callbacks, sites
from entangle_jax.testing._sanitize.calls import SanitizedCall


def host_runs(calls: list[SanitizedCall]) -> list[SanitizedCall]:
  """`calls` with each host callback of a loop or a branch placed in an
  execution where the records leave one choice (`place_host_calls`, the
  native calls' executions read from `calls`), the anchor's calls left
  out."""
  native: dict[int, set[int]] = defaultdict(set)
  with_native: set[int] = set()
  host = []
  for call in calls:
    if call.function is not None:
      host.append(call)
    elif call.site is not None:
      with_native.add(call.site.module.serial)
      if not call.site.context:
        native[call.site.module.serial].add(call.run_id)
  placed = iter(place_host_calls(host, native, with_native))
  out = []
  for call in calls:
    if call.function is None:
      out.append(call)
    elif call.function != sites.ANCHOR:
      out.append(next(placed))
  return out


def place_host_calls(
  host: list[SanitizedCall],
  native: dict[int, set[int]],
  with_native: Collection[int] = (),
  why: dict[str, int] | None = None,
) -> list[SanitizedCall]:
  """The host callbacks `host`, each of a loop or a branch (whose run id
  its recorder could not know) placed in an execution where the records
  leave one choice:

  * its module ran once (its places outside every loop and branch, native
    or host, the sanitizer's anchor included, ran in one execution);
  * or its module, which made no native call, ran more than once, and
    the records separate its executions (`_separated`).

  * or its module runs on one TPU device and made no native call, and
    nothing counted its executions: they ran one after another
    in the device's stream, so its calls are one sequence
    (`callbacks.SEQUENCE_RUN`), in which two places of one loop pair
    iteration by iteration (`pairing`), and no other two.

  The others keep `callbacks.UNKNOWN_RUN`: not compared for order, and
  counted. The anchor's own calls are left out.

  `native`: by module serial, the run ids of its native calls outside
  every loop and branch; `with_native`: the serials of the modules that
  made a native call anywhere (their executions are XLA's run ids, which
  a host callback's recorder cannot tell apart); `why`, when given, counts
  the calls left unplaced by the reason, in words (`unplaced_reason`).
  """
  unknown = callbacks.UNKNOWN_RUN
  if not any(c.run_id == unknown or c.function == sites.ANCHOR for c in host):
    return host
  ran: dict[int, set[int]] = defaultdict(set)
  of_module: dict[int, list[SanitizedCall]] = defaultdict(list)
  for call in host:
    if call.site is not None:
      of_module[call.site.module.serial].append(call)
      if not call.site.context:
        ran[call.site.module.serial].add(call.run_id)
  separated: dict[int, dict[int, int] | None] = {}
  out = []
  for call in host:
    if call.run_id == unknown and call.site is not None:
      module = call.site.module
      serial = module.serial
      ids = ran.get(serial, set())
      others = native.get(serial, set())
      if len(ids) <= 1 and len(others) <= 1 and (ids or others):
        # Host callbacks' run ids are their own (-1 - k): the one
        # execution's is -1 when a host callback outside every loop and
        # branch ran, else the native calls'.
        one = next(iter(ids)) if ids else next(iter(others))
        call = dataclasses.replace(call, run_id=one)
      elif len(ids) > 1 and serial not in with_native:
        if serial not in separated:
          separated[serial] = _separated(of_module[serial])
        found = separated[serial]
        if found is not None:
          call = dataclasses.replace(call, run_id=found[id(call)])
      elif not ids and not others and _in_one_stream(module, with_native):
        call = dataclasses.replace(call, run_id=callbacks.SEQUENCE_RUN)
      if call.run_id == unknown and why is not None:
        reason = unplaced_reason(
          module, max(len(ids), len(others)), serial in with_native
        )
        why[reason] = why.get(reason, 0) + 1
    if call.function != sites.ANCHOR:  # It only counted executions.
      out.append(call)
  return out


def _in_one_stream(
  module: sites.SanitizedModule, with_native: Collection[int]
) -> bool:
  """Whether `module`'s executions ran one after another, each to its
  end, in one device's stream: a module of one TPU device (a TPU runs one
  program at a time; XLA:CPU runs executions at once on several threads;
  a GPU is left out until it is measured), with no native call (whose
  executions are XLA's run ids, apart from its callbacks')."""
  return (
    module.one_device
    and platforms.one_stream(module.platform)
    and module.serial not in with_native
  )


def unplaced_reason(
  module: sites.SanitizedModule, executions: int, with_native: bool
) -> str:
  """Why the host callbacks of a loop or a branch of `module` could not
  be placed in an execution, in words: what the records showed of it
  (`executions`: how many its counted calls, the counter's or those
  outside every loop and branch, were taken from; `with_native`: it made
  native calls). Said as it was seen, so that a module that ran once is
  never said to have run more than once."""
  if executions == 0:
    if module.anchor is None:
      return (
        "their module has no execution counter (the sanitizer adds one to "
        "a module of one partition and one replica on CPU, where it can), "
        "and nothing outside every loop and branch ran to count its "
        "executions"
      )
    return (
      "the execution counter the sanitizer added to their module never "
      "ran (XLA removed it), so none of its executions was counted"
    )
  if with_native:
    return (
      f"their module ran {executions} times and made native calls, whose "
      "executions are XLA's, which a host callback cannot tell apart"
    )
  return (
    f"their module ran {executions} times and the records do not separate "
    "its executions (they ran at once on several threads, or interleaved)"
  )


def _separated(calls: list[SanitizedCall]) -> dict[int, int] | None:
  """Each host callback of a loop or a branch among one module's host
  calls (its anchor's included), by id, with its execution's run id,
  where the records separate the module's executions; else None.

  They do when every call ran on one thread (a thread runs one execution
  at a time: XLA:CPU calls an execution's host callbacks from the thread
  that runs it) and, in order of start, the first call is a counted one
  (outside every loop and branch: its run id says its execution) and each
  execution's counted calls come before the next execution's. A call in a
  loop or a branch then belongs to the execution whose counted call came
  last before it. Executions on several threads, or a loop's call before
  the first counted one (the anchor did not run first), are ambiguous.
  """
  if len({c.thread for c in calls}) != 1:
    return None
  unknown = callbacks.UNKNOWN_RUN
  current: int | None = None
  done: set[int] = set()
  out: dict[int, int] = {}
  for call in sorted(calls, key=lambda c: c.start_ns):
    if call.run_id != unknown:
      if call.run_id != current:
        if call.run_id in done:
          return None  # An earlier execution's counted call came back.
        if current is not None:
          done.add(current)
        current = call.run_id
    elif current is None:
      return None
    else:
      out[id(call)] = current
  return out
