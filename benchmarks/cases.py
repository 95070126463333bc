"""What the benchmark compares and measures, named once for every side.

The runner, the worker subprocesses and the report all read these names, so
this module imports nothing but the standard library: the runner never loads
JAX because of it.
"""

from __future__ import annotations

import dataclasses

OURS = "entangle-jax"
OURS_AGAIN = f"{OURS} (again)"  # our handler timed twice: its noise floor
PEER_VERSION = "0.1.1"
PEER = f"entangle-jax {PEER_VERSION}"
BARRIER = "optimization_barrier"
BASELINE = "identity"
NOISE = "identity (again)"
IMPLS = (OURS, PEER, BARRIER, BASELINE, NOISE)
COMPILE_IMPLS = (OURS, BARRIER, BASELINE)

SCAN_STEPS = 100_000
# The in_program_order part: the hazard scan under in_program_order against
# the same scan written with Resource (timed twice: its noise floor), in one
# process, alternating, each round the fastest of a few calls.
PO_RESOURCE = "Resource"
PO_ORDERED = "in_program_order"
PO_RESOURCE_AGAIN = "Resource (again)"
PO_PROGRAMS = (PO_RESOURCE, PO_ORDERED, PO_RESOURCE_AGAIN)
PO_STEPS = 10_000
PO_ROUNDS = 30
QUICK_PO_ROUNDS = 10
COMPILE_SIZES = (1, 10, 100, 1000, 2000)
QUICK_COMPILE_SIZES = (1, 10, 100)
# The order analysis: Resource programs of this many write-then-read pairs
# (twice as many native calls).
ANALYSIS_PAIRS = (250, 500, 1000)
QUICK_ANALYSIS_PAIRS = (50, 100, 200)
# Programs of the dump the race check reads (the dump_check part): a
# small test suite's worth (a published solver's 74 tests compiled 633);
# the fewer, the larger the command's fixed start-up cost is as a share.
DUMP_MODULES = 150
QUICK_DUMP_MODULES = 60


@dataclasses.dataclass(frozen=True)
class Metric:
  """A timed metric: ``kind`` "diff" is ns over identity, "ratio" is x it."""

  key: str
  header: str
  title: str
  kind: str
  raw: str  # the worker's key: seconds per call of the whole program


METRICS = (
  Metric(
    "scan_1x1_ns",
    "scan 1x1, ns a call",
    "scan, 1 leaf x 1 witness",
    "diff",
    "scan_1x1_s",
  ),
  Metric(
    "scan_3x4_ns",
    "scan 3x4, ns a step",
    "scan, 3 leaves x 4 witnesses",
    "diff",
    "scan_3x4_s",
  ),
  Metric(
    "resource_1e3",
    "program, B=1e3, x identity",
    "jit(vmap(write, read, entangle, write)), B=1e3",
    "ratio",
    "resource_1e+03_s",
  ),
  Metric(
    "resource_1e5",
    "program, B=1e5, x identity",
    "jit(vmap(write, read, entangle, write)), B=1e5",
    "ratio",
    "resource_1e+05_s",
  ),
  Metric(
    "donated_1e5",
    "donated, B=1e5, x identity",
    "jit(vmap(entangle)), donated (1e5, 4) payload",
    "ratio",
    "donated_1e+05_s",
  ),
)

# The compiled-HLO counts: the structure part's key, and the report's label.
STRUCTURE = (
  ("custom_calls_3x4", "custom calls, 3 leaves x 4 witnesses"),
  ("collectives_sharded", "collectives, 8-way sharded payload"),
  ("copies_donated", "copies, donated payload"),
  ("copies_resource", "copies, vmap program (B=1e3)"),
  ("loops_resource", "while loops, vmap program (B=1e3)"),
  ("copies_batched_donated", "copies, jit(vmap) with donated payload"),
)
