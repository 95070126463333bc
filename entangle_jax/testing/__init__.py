"""Tools for testing code that uses `entangle`.

Proving order on the module XLA runs:

* ``happens_before(compiled, before, after)``: is every op ``before`` selects
  ordered before every op ``after`` selects by edges the runtime honours?
* ``assert_happens_before(compiled, before, after)``: the same, raising an
  ``AssertionError`` that names each unordered pair and the usual fix.
* ``races(compiled, among=None)``: pairs of calls that may conflict (one
  resource, at least one writing) and that nothing orders;
  ``format_races`` renders them like ``assert_happens_before`` does.
* ``declare_target_mode(target, "read")``, ``declare_target(...)``: what
  calls to your target touch (both also ``entangle_jax``'s own names);
  ``Access`` is what an op reads or writes (``Op.accesses``).
* ``OrderAnalysis``: the same questions, parsing the module once; ``Op`` and
  ``Race`` are what it returns.
* ``is_effectful`` / ``is_user_native_call``: which ops a named-scope
  selector picks, and which ``races`` considers by default.
* ``module_text(compiled)``: the optimized HLO text that they analyse.
* ``race_check()``: a context manager that checks every module XLA
  compiles inside it (``with race_check(): absltest.main()``); the pytest
  plugin (``pytest --entangle-races=fail``) and ``python -m
  entangle_jax.testing DUMP`` do the same for a test run and a dump.
* ``order_graph(compiled, among=None, format="dot")``: the whole picture, as
  Graphviz DOT or Mermaid text.
* ``races_across([module_rank0, module_rank1, ...])``: whether the ranks of a
  multi-process program make their communicating calls (collectives,
  sends, receives) in a compatible order; a ``CrossRankResult``
  (``python -m entangle_jax.testing --ranks DIR0 DIR1 ...`` does the same
  for dumps). ``Communication`` is how a declaration says that a target
  communicates. ``record_executions(DIR)`` records which compiled
  modules a rank runs, in order, beside its dump, so that ``--ranks``
  compares each rank's sequence of jitted calls.

Seeing what did happen, at run time:

* ``sanitize()``: a context manager that records every call of the FFI
  targets registered after it started (``pytest --entangle-sanitize`` does
  it for each test); its ``Seen`` holds the calls (``SanitizedCall``), the
  races (``SanitizerRace``: calls on one ``SanitizedObject`` that overlapped
  or ran out of program order, each call at its ``CallSite``) and the
  contradictions of the declarations (``Contradiction``). With
  ``watchdog=seconds`` a call in flight past the limit is reported (each
  thread's call in flight); with ``ranks=DIR`` each rank of a
  multi-process launch writes its communicating calls, and
  ``merge_sanitized_ranks(DIR)`` (``python -m entangle_jax.testing
  --sanitized-ranks DIR``) names the first call at which the ranks differ
  (``SanitizedRanks``: each rank's ``SanitizedRankRecord`` of
  ``SanitizedRankCall``, the first ``SanitizedRankDivergence``).

A tiny mutable native resource, for reproducing ordering hazards
(`entangle_jax.testing.example_store`, whose names are reachable here too):

* ``write_slot``, ``read_slot``, ``reset_slots``, ``slot_values``,
  ``NUM_SLOTS``.
* ``call_log``: the order in which its host calls actually ran.

Importing this package loads no extension and changes no process-wide
state. The first use of one of the example store's names (or
``import entangle_jax.testing.example_store``) loads the store's extension,
registers its FFI targets with XLA. (What its targets do is built into the
analysis, loaded or not.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.declaration import (
  Declarations,
  PythonArgument,
  SafePair,
  TargetDeclaration,
)
from entangle_jax._src.targets.in_code import (
  declare_target,
  declare_target_mode,
)
from entangle_jax._src.targets.sources import (
  current as declarations_in_effect,
)
from entangle_jax.testing._analysis.across_ranks import (
  CrossRankResult,
  Deadlock,
  MatchedStep,
  Mismatch,
  RankCall,
  RankDependent,
  UnorderedCalls,
  races_across,
)
from entangle_jax.testing._analysis.device_processes import ProcessMap
from entangle_jax.testing._analysis.ops import Op, Race, XlaChange
from entangle_jax.testing._analysis.order_analysis import (
  LeftOut,
  OrderAnalysis,
  Races,
)
from entangle_jax.testing._analysis.selectors import (
  is_effectful,
  is_user_native_call,
)
from entangle_jax.testing._analysis.source_lines import mark_library
from entangle_jax.testing._hlo.module_text import module_text
from entangle_jax.testing._order.access import Access
from entangle_jax.testing._order.objects import ObjectRef
from entangle_jax.testing._sanitize.calls import SanitizedCall, SanitizedObject
from entangle_jax.testing._sanitize.checks import Contradiction, SanitizerRace
from entangle_jax.testing._sanitize.rank_calls import (
  SanitizedRankCall,
  SanitizedRankDivergence,
  SanitizedRankRecord,
  SanitizedRanks,
  merge_sanitized_ranks,
)
from entangle_jax.testing._sanitize.session import Seen, sanitize
from entangle_jax.testing._sanitize.sites import CallSite, SanitizedModule
from entangle_jax.testing._ways_in.executions import record_executions
from entangle_jax.testing._ways_in.order_graph import order_graph
from entangle_jax.testing._ways_in.queries import (
  assert_happens_before,
  format_races,
  happens_before,
  races,
)
from entangle_jax.testing._ways_in.race_check import RaceCheckError, race_check

if TYPE_CHECKING:  # Loaded on first use (`__getattr__`), not on import.
  from entangle_jax.testing.example_store import (
    NUM_SLOTS,
    CallRecord,
    call_log,
    has_cuda_device,
    read_slot,
    reset_slots,
    slot_values,
    write_slot,
  )

_EXAMPLE_STORE_NAMES = frozenset(
  {
    "NUM_SLOTS",
    "CallRecord",
    "Contradiction",
    "call_log",
    "has_cuda_device",
    "read_slot",
    "reset_slots",
    "slot_values",
    "write_slot",
  }
)

__all__ = [
  "NUM_SLOTS",
  "Access",
  "CallRecord",
  "CallSite",
  "Communication",
  "Contradiction",
  "CrossRankResult",
  "Deadlock",
  "Declarations",
  "LeftOut",
  "MatchedStep",
  "Mismatch",
  "ObjectRef",
  "Op",
  "OrderAnalysis",
  "ProcessMap",
  "PythonArgument",
  "Race",
  "RaceCheckError",
  "Races",
  "RankCall",
  "RankDependent",
  "SafePair",
  "SanitizedCall",
  "SanitizedModule",
  "SanitizedObject",
  "SanitizedRankCall",
  "SanitizedRankDivergence",
  "SanitizedRankRecord",
  "SanitizedRanks",
  "SanitizerRace",
  "Seen",
  "TargetDeclaration",
  "UnorderedCalls",
  "XlaChange",
  "assert_happens_before",
  "call_log",
  "declarations_in_effect",
  "declare_target",
  "declare_target_mode",
  "format_races",
  "happens_before",
  "has_cuda_device",
  "is_effectful",
  "is_user_native_call",
  "mark_library",
  "merge_sanitized_ranks",
  "module_text",
  "order_graph",
  "race_check",
  "races",
  "races_across",
  "read_slot",
  "record_executions",
  "reset_slots",
  "sanitize",
  "slot_values",
  "write_slot",
]


def __getattr__(name: str) -> Any:
  # PEP 562: the example store loads a native extension and registers FFI
  # targets, which the analysis never needs; it loads when first used.
  if name in _EXAMPLE_STORE_NAMES:
    store = importlib.import_module("entangle_jax.testing.example_store")
    return getattr(store, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted({*globals(), *_EXAMPLE_STORE_NAMES})
