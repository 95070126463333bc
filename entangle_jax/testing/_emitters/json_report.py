"""The JSON emitter: everything a report says, every pair included, from
the findings (`entangle_jax.testing._report.findings`)."""

from __future__ import annotations

from typing import Any

from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._report import race_text
from entangle_jax.testing._report.findings import ModuleResult, Run


def _op(op: Op) -> dict[str, Any]:
  return {
    "instruction": op.name,
    "target": op.target,
    "access": op.access_text,
    "scope": op.user_scope,
    "location": op.location,
    "binding_location": op.binding_location,
    "backward": op.backward,
  }


def _module(result: ModuleResult) -> dict[str, Any]:
  group_of = {
    id(race): group
    for group in result.findings.groups
    for entry in group.entries
    for race in entry.races
  }
  platform = result.platform
  return {
    "path": result.path,
    "module": result.module,
    # As reports name it ("cpu", "CUDA sm_90a"; null when the file names
    # none), as the file name writes it ("sm_9.0a_gpu"), and the runtime
    # whose model the check applied ("XLA:GPU"; null for a platform it
    # does not know).
    "platform": str(platform) if platform else None,
    "platform_in_file_name": platform.written if platform else None,
    "runtime": platform.runtime if platform else None,
    "native_calls": result.native_calls,
    "test": result.test,
    # Why the check could not answer for the module; null when it did.
    "unchecked": result.unchecked,
    "races": [  # In the order the analysis found them.
      {
        "first": _op(race.first),
        "second": _op(race.second),
        "across_devices": race.across_devices,
        "cause": group_of[id(race)].cause.headline,
        "fix": group_of[id(race)].fix,
        # How in_program_order fixes it, when it does (else null); also
        # the end of "fix".
        "in_program_order": group_of[id(race)].program_order,
      }
      for race in result.races
    ],
    # What declared safe pairs left out, by entry: taken at their word.
    "safe_pairs_left_out": [
      {
        "first": s.pair.first,
        "second": s.pair.second,
        "reason": s.pair.reason,
        "source": s.pair.source,
        "count": s.count,
        "pairs": [
          {"first": _op(race.first), "second": _op(race.second)}
          for race in s.races
        ],
      }
      for s in result.findings.left_out
    ],
    "declarations_applied": list(result.declared),
  }


def as_json(run: Run, status: int) -> dict[str, Any]:
  """The command's ``--format json`` answer for `run`, with exit `status`."""
  return {
    "status": status,
    "summary": race_text.summary(run),
    "safe_pairs_left_out": run.left_out,
    "platform_note": race_text.platform_note(run),
    # Shipped bindings installed at versions their declarations do not
    # cover, whose undeclared calls are in the pairs.
    "version_notes": list(run.version_notes),
    "modules": [_module(r) for r in run.results],
  }
