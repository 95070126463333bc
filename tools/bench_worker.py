#!/usr/bin/env python3
"""One benchmark subprocess: measures one implementation, prints JSON.

Run by ``tools/bench.py`` (never by hand), with the Python of the venv that
holds the implementation: entangle-jax 0.1.1 imports as ``entangle_jax``
too, so it lives in a venv of its own. ``--part`` picks what to measure:

* ``timing``: per-call cost in a scan and ``jit(vmap)`` programs;
* ``compile``: trace + lower + compile time against the number of leaves;
* ``structure``: counts of custom calls, collectives and copies in the
  compiled HLO, and the custom-call instruction itself;
* ``handlers``: this checkout's handler against the peer's compiled
  handler, in one process, behind identical custom calls.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys

from timing import call_seconds, chained_seconds, compile_seconds

SCAN_STEPS = 100_000
COMPILE_SIZES = (1, 10, 100, 1000, 2000)
QUICK_COMPILE_SIZES = (1, 10, 100)
_COLLECTIVE = re.compile(
  r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
  r"(-start)?\("
)


# --- the implementations -----------------------------------------------------


def entangle_fn(impl: str):
  """``impl``'s ``entangle(payload, *witnesses)``."""
  import jax

  if impl.startswith("entangle-jax"):
    from entangle_jax import entangle

    return entangle
  if impl == "optimization_barrier":
    return lambda payload, *w: jax.lax.optimization_barrier((payload, w))[0]
  if impl.startswith("identity"):
    return lambda payload, *w: payload
  raise ValueError(f"unknown implementation {impl!r}")


def example_resource(native_path: str | None):
  """``(write_slot, read_slot, num_slots)`` of this checkout's resource.

  In this checkout's venv they come from ``entangle_jax.testing``. The
  peer's venv has its own ``entangle_jax``, so there the same compiled
  extension is loaded from ``native_path`` and its handlers are called with
  the same targets and attributes as ``entangle_jax.testing`` uses, so that
  every implementation runs the same program around its ``entangle``.
  """
  if native_path is None:
    from entangle_jax.testing import NUM_SLOTS, read_slot, write_slot

    return write_slot, read_slot, NUM_SLOTS
  import jax
  import jax.numpy as jnp

  spec = importlib.util.spec_from_file_location(
    "_example_resource_ffi", native_path
  )
  if spec is None or spec.loader is None:
    raise ImportError(f"cannot load the example resource from {native_path}")
  native = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(native)
  write_target, read_target = (
    "entangle_jax_write_slot",
    "entangle_jax_read_slot",
  )
  jax.ffi.register_ffi_target(
    write_target, native.registrations()["write_slot"], platform="cpu"
  )
  jax.ffi.register_ffi_target(
    read_target, native.registrations()["read_slot"], platform="cpu"
  )

  def write_slot(slot, value):
    call = jax.ffi.ffi_call(
      write_target,
      jax.ShapeDtypeStruct(jnp.shape(slot), jnp.int32),
      has_side_effect=True,
      vmap_method="broadcast_all",
    )
    return call(jnp.asarray(slot, jnp.int32), jnp.asarray(value, jnp.float32))

  def read_slot(token):
    call = jax.ffi.ffi_call(
      read_target,
      jax.ShapeDtypeStruct(jnp.shape(token), jnp.float32),
      vmap_method="broadcast_all",
    )
    return call(jnp.asarray(token, jnp.int32))

  return write_slot, read_slot, native.num_slots


# --- programs ----------------------------------------------------------------


def scan_program(entangle, leaves: int, witnesses: int):
  """A jitted scan whose step entangles ``leaves`` with ``witnesses``.

  Returns ``(fn, args)``. Witnesses change every step, so no call can be
  hoisted out of the loop.
  """
  import jax
  import jax.numpy as jnp

  def body(carry, _):
    payload, wits = carry
    payload = entangle(payload, *wits)
    return (payload, tuple(w + 1 for w in wits)), None

  @jax.jit
  def run(payload, wits):
    return jax.lax.scan(body, (payload, wits), None, length=SCAN_STEPS)[0]

  payload = tuple(jnp.zeros(()) for _ in range(leaves))
  payload = payload[0] if leaves == 1 else payload
  wits = tuple(jnp.zeros(()) for _ in range(witnesses))
  return run, (payload, wits)


def resource_program(entangle, resource, batch: int):
  """``jit(vmap)`` of: native write, native read, entangle, native write.

  The payload is the token the first write returns, an intermediate value,
  so XLA may alias it in place: no copy is timed.
  """
  import jax
  import jax.numpy as jnp

  write_slot, read_slot, num_slots = resource

  def step(slot, value):
    token = write_slot(slot, value)
    x = read_slot(token)
    token = entangle(token, x)  # the second write waits for the read
    return write_slot(token, x + 1.0), x

  slots = jnp.arange(batch, dtype=jnp.int32) % num_slots
  return jax.jit(jax.vmap(step)), (slots, jnp.ones(batch, jnp.float32))


def donated_program(entangle, batch: int):
  """``jit(vmap(entangle))`` with the payload donated.

  Returns ``(fn, payload, witness)``. Chain the calls
  (`timing.chained_seconds`): each call consumes the previous call's
  payload, so XLA may write the result in place.
  """
  import jax
  import jax.numpy as jnp

  batched = jax.jit(jax.vmap(lambda p, w: entangle(p, w)), donate_argnums=0)
  payload = jnp.ones((batch, 4), jnp.float32)
  return batched, payload, jnp.ones((batch, 2), jnp.float32)


# --- parts -------------------------------------------------------------------


def versions(impl: str) -> dict:
  """Versions of what this subprocess runs."""
  import importlib.metadata
  import platform

  import jax
  import jaxlib

  found = {
    "python": platform.python_version(),
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
  }
  if impl.startswith("entangle-jax"):
    found["entangle-jax"] = importlib.metadata.version("entangle-jax")
  return found


def _record(result: dict, name: str, times: list[float]) -> None:
  # The fastest call is the one least disturbed by other load on a shared
  # machine; the median is kept too, for readers who prefer it.
  import statistics

  result[f"{name}_s"] = min(times)
  result[f"{name}_median_s"] = statistics.median(times)


def timing(impl: str, quick: bool, native_path: str | None) -> dict:
  """Fastest and median of repeated calls of each program, in seconds."""
  entangle = entangle_fn(impl)
  resource = example_resource(native_path)
  result = {}
  for name, (leaves, witnesses) in {"1x1": (1, 1), "3x4": (3, 4)}.items():
    fn, args = scan_program(entangle, leaves, witnesses)
    _record(result, f"scan_{name}", call_seconds(fn, args, 5 if quick else 9))
  for batch, repeats in ((1_000, 21 if quick else 51), (100_000, 21)):
    fn, args = resource_program(entangle, resource, batch)
    _record(result, f"resource_{batch:.0e}", call_seconds(fn, args, repeats))
  fn, payload, witness = donated_program(entangle, 100_000)
  times = chained_seconds(
    lambda p: fn(p, witness), payload, 11 if quick else 21
  )
  _record(result, "donated_1e+05", times)
  result["versions"] = versions(impl)
  return result


def _leaves(n: int) -> list:
  import jax.numpy as jnp

  return [jnp.zeros((), jnp.float32) for _ in range(n)]


def compile_scaling(impl: str, quick: bool) -> dict:
  """Seconds to trace, lower and compile one entangle of n leaves."""
  entangle = entangle_fn(impl)
  compile_seconds(lambda p, w: entangle(p, w), (_leaves(1), _leaves(1)))
  sizes = QUICK_COMPILE_SIZES if quick else COMPILE_SIZES
  result: dict[str, dict[str, float]] = {"payload": {}, "witness": {}}
  for n in sizes:
    for axis, (payload, witnesses) in {
      "payload": (_leaves(n), _leaves(1)),
      "witness": (_leaves(1), _leaves(n)),
    }.items():
      # A fresh function object each time: no trace or compile cache hits.
      fn = lambda p, w: entangle(p, *w)  # noqa: E731
      result[axis][str(n)] = compile_seconds(fn, (payload, witnesses))
  return {"compile_s": result, "versions": versions(impl)}


def _compiled_text(fn, *args, **jit_kwargs) -> str:
  import jax

  return _text(jax.jit(fn, **jit_kwargs).lower(*args).compile())


def _text(compiled) -> str:
  text = compiled.as_text()
  if text is None:
    raise RuntimeError("the backend gives no text of the compiled module")
  return text


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


def structure(impl: str, native_path: str | None) -> dict:
  """Counts in compiled HLO; needs 8 host devices for the sharded case."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  entangle = entangle_fn(impl)
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
  fn, args = resource_program(entangle, example_resource(native_path), 1000)
  resource = _text(fn.lower(*args).compile())
  batched_fn, payload, witness = donated_program(entangle, 1000)
  batched = _text(batched_fn.lower(payload, witness).compile())
  scan_fn, scan_args = scan_program(entangle, 1, 1)
  scan = _text(scan_fn.lower(*scan_args).compile())
  copies = re.compile(r"= \S+ copy\(")
  return {
    "custom_calls_3x4": len(re.findall(r"\bcustom-call\(", three_by_four)),
    "collectives_sharded": len(_COLLECTIVE.findall(sharded)),
    "copies_donated": len(copies.findall(donated)),
    "copies_resource": len(copies.findall(resource)),
    "loops_resource": len(re.findall(r"\bwhile\(", resource)),
    "copies_batched_donated": len(copies.findall(batched)),
    "custom_call_1x1": [
      line for line in custom_call_lines(scan) if "slot" not in line
    ],
    "versions": versions(impl),
  }


def handlers(peer_extension: str, quick: bool) -> dict:
  """ns a scan step with each package's handler behind the same call.

  Both handlers are registered in this process (the peer's extension
  registers its target when loaded) and called through `jax.ffi.ffi_call`
  with the same operands, aliasing and API version, so only the handler
  differs. Our handler is timed twice, as two separately compiled programs,
  for an in-process noise floor. Rounds alternate the three programs.
  """
  import jax
  import jax.numpy as jnp

  from entangle_jax._src.native import ENTANGLE_TARGET

  spec = importlib.util.spec_from_file_location("_ffi", peer_extension)
  if spec is None or spec.loader is None:
    raise ImportError(f"cannot load the peer's extension {peer_extension}")
  spec.loader.exec_module(importlib.util.module_from_spec(spec))
  targets = {
    "entangle-jax": ENTANGLE_TARGET,
    "entangle-jax 0.1.1": "entangle_jax",
    "entangle-jax (again)": ENTANGLE_TARGET,
  }

  def aliased_call(target):
    call = jax.ffi.ffi_call(
      target,
      jax.ShapeDtypeStruct((), jnp.float32),
      input_output_aliases={0: 0},
    )
    return lambda payload, witness: call(payload, witness)

  programs = {
    name: scan_program(aliased_call(target), 1, 1)
    for name, target in targets.items()
  }
  for fn, args in programs.values():
    jax.block_until_ready(fn(*args))
  names = list(programs)
  per_round: dict[str, list[float]] = {name: [] for name in names}
  for r in range(10 if quick else 30):
    order = names[r % 3 :] + names[: r % 3]
    for name in order[::-1] if r % 2 else order:
      fn, args = programs[name]
      fastest = min(call_seconds(fn, args, 3))
      per_round[name].append(fastest / SCAN_STEPS * 1e9)
  return {"handler_ns": per_round, "versions": versions("entangle-jax")}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--impl", required=True)
  parser.add_argument(
    "--part",
    required=True,
    choices=("timing", "compile", "structure", "handlers"),
  )
  parser.add_argument("--quick", action="store_true")
  parser.add_argument(
    "--native", help="example resource extension to load (peer venv only)"
  )
  parser.add_argument("--peer-extension", help="the peer's compiled _ffi")
  args = parser.parse_args(argv)
  import warnings

  import jax

  # Donation an implementation cannot use is part of what is measured.
  warnings.filterwarnings("ignore", message=".*donated buffers.*")
  if args.part == "structure":
    jax.config.update("jax_num_cpu_devices", 8)
    result = structure(args.impl, args.native)
  elif args.part == "handlers":
    result = handlers(args.peer_extension, args.quick)
  elif args.part == "compile":
    result = compile_scaling(args.impl, args.quick)
  else:
    result = timing(args.impl, args.quick, args.native)
  print(json.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
