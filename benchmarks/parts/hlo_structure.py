"""The "structure" part: what each implementation leaves in compiled HLO.

Counts of custom calls, collectives, copies and loops, and the custom-call
instruction itself. The sharded case needs 8 host devices, which the worker
sets up before this module is imported.
"""

from __future__ import annotations

import argparse
import re

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import programs

_COLLECTIVE = re.compile(
  r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
  r"(-start)?\("
)
_COPY = re.compile(r"= \S+ copy\(")


def _text(compiled) -> str:
  text = compiled.as_text()
  if text is None:
    raise RuntimeError("the backend gives no text of the compiled module")
  return text


def _compiled_text(fn, *args, **jit_kwargs) -> str:
  return _text(jax.jit(fn, **jit_kwargs).lower(*args).compile())


def custom_call_lines(text: str) -> list[str]:
  """Custom-call instructions, without names, metadata and the layouts.

  What remains is what XLA acts on: target, operands' shapes, aliasing,
  API version, side effects, backend config.
  """
  lines = []
  for line in text.splitlines():
    if " custom-call(" not in line:
      continue
    line = re.sub(r", metadata=\{[^}]*\}", "", line.strip())
    line = re.sub(r"^(ROOT )?%\S+ = ", "", line)
    line = re.sub(r"%[\w.-]+", "%_", line)
    lines.append(line)
  return lines


def measure(args: argparse.Namespace) -> dict:
  """Counts in the compiled HLO of each program around ``args.impl``."""
  entangle = programs.entangle_fn(args.impl)
  three_by_four = _compiled_text(
    lambda p, w: entangle(p, *w),
    tuple(jnp.ones(3) for _ in range(3)),
    tuple(jnp.ones(2) for _ in range(4)),
  )
  mesh = jax.make_mesh((8,), ("x",))
  x = jax.device_put(jnp.ones(64), NamedSharding(mesh, P("x")))
  w = jax.device_put(jnp.ones((8, 64)), NamedSharding(mesh, P(None, "x")))
  sharded = _compiled_text(lambda p, w: entangle(p, w), x, w)
  donated = _compiled_text(
    lambda p, w: entangle(p, w), jnp.ones(64), 1.0, donate_argnums=0
  )
  resource = programs.example_resource(args.native)
  fn, fn_args = programs.resource_program(entangle, resource, 1000)
  resource_text = _text(fn.lower(*fn_args).compile())
  batched_fn, payload, witness = programs.donated_program(entangle, 1000)
  batched = _text(batched_fn.lower(payload, witness).compile())
  scan_fn, scan_args = programs.scan_program(entangle, 1, 1)
  scan = _text(scan_fn.lower(*scan_args).compile())
  return {
    "custom_calls_3x4": len(re.findall(r"\bcustom-call\(", three_by_four)),
    "collectives_sharded": len(_COLLECTIVE.findall(sharded)),
    "copies_donated": len(_COPY.findall(donated)),
    "copies_resource": len(_COPY.findall(resource_text)),
    "loops_resource": len(re.findall(r"\bwhile\(", resource_text)),
    "copies_batched_donated": len(_COPY.findall(batched)),
    "custom_call_1x1": [
      line for line in custom_call_lines(scan) if "slot" not in line
    ],
  }
