"""The "program_order" part: the hazard scan under ``in_program_order``
against the same scan written with ``Resource``, in one process.

Each scan step is the example store's hazard, ``write(slot, 1); x =
read(slot); write(slot, 2)``, the second write's token the next step's
slot (`benchmarks.ordering_cost.hazard_scan`, no delay). One program
writes it with ``Resource``; the other is the unordered step under
``jax.jit(in_program_order(program))``, which adds the entangle calls. The
``Resource`` program is compiled twice, and timed as two programs: how far
apart two identical programs come in this process is the noise any
difference must clear. Rounds alternate the three (`benchmarks.rounds`);
a round's value is the fastest of a few calls. It also counts the entangle
calls in each compiled loop body: the calls each step makes.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from benchmarks import orderings
from benchmarks.cases import (
  PO_ORDERED,
  PO_RESOURCE,
  PO_RESOURCE_AGAIN,
  PO_ROUNDS,
  PO_STEPS,
  QUICK_PO_ROUNDS,
)
from benchmarks.ordering_cost import hazard_scan
from benchmarks.rounds import alternate
from benchmarks.timing import call_seconds
from entangle_jax import in_program_order, testing
from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing import _hlo


def programs(steps: int) -> dict:
  """The three jitted scans, by name."""
  return {
    PO_RESOURCE: jax.jit(hazard_scan(orderings.resource_hazard, steps)),
    PO_ORDERED: jax.jit(
      in_program_order(hazard_scan(orderings.native_hazard(), steps))
    ),
    PO_RESOURCE_AGAIN: jax.jit(hazard_scan(orderings.resource_hazard, steps)),
  }


def loop_entangles(compiled: jax.stages.Compiled) -> int:
  """Entangle calls in the bodies of the compiled module's while loops."""
  module = _hlo.parse(testing.module_text(compiled))
  bodies = {
    i.body
    for instructions in module.computations.values()
    for i in instructions
    if i.opcode == "while" and i.body
  }
  return sum(
    1
    for body in bodies
    for i in module.computations[body]
    if i.target == ENTANGLE_TARGET
  )


def measure(args: argparse.Namespace) -> dict:
  """ns a scan step of each program over alternating rounds, and the
  entangle calls in each loop body."""
  slot = (jnp.int32(0),)
  scans = programs(PO_STEPS)
  entangles = {
    name: loop_entangles(fn.lower(*slot).compile())
    for name, fn in scans.items()
  }
  for fn in scans.values():
    jax.block_until_ready(fn(*slot))

  def ns_a_step(name: str) -> float:
    return min(call_seconds(scans[name], slot, 3)) / PO_STEPS * 1e9

  rounds = QUICK_PO_ROUNDS if args.quick else PO_ROUNDS
  return {
    "ns": alternate(list(scans), rounds, ns_a_step),
    "loop_entangles": entangles,
    "steps": PO_STEPS,
  }
