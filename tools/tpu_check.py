#!/usr/bin/env python3
"""TPU checks of entangle-jax's host-callback ordering; run by
tools/tpu_check.sh, as ``python3 tools/tpu_check.py measure OUT_DIR``.

Standalone (it imports nothing from the checkout), so that it runs on a TPU
machine where only the wheel is installed. One process holds the chip:

1. The hazard (eight groups of io_callback write(1) -> read -> write(2), a
   Python slot each): wrong reads of 160 for each ordering (none, entangle,
   Resource, in_program_order, ordered=True, data), and the order in which
   the callbacks ran, against program order (pairs run out of it).
2. races() on the TPU-compiled modules, from the Compiled (no barriers
   visible) and from the Lowered (barriers read from its HLO), and the same
   programs compiled for XLA:CPU.
3. A further set of host-callback programs: dumped (TPU and CPU modules,
   OUT_DIR/dump, named ``tpu_*``), their pairs on both platforms.
4. The sanitizer around the racing and the ordered hazard; then the loop
   shapes of issue 68 (a loop whose first callback is a pure_callback, run
   once; two io_callbacks in a loop, ordered and not, run 3 times): how
   many iterations ran out of program order (the callbacks' own log), how
   many the sanitizer reported, how many calls it left not compared and
   why, and the names it gives the callbacks. Then nested loops (issue
   78, ``sanitizer_nested``): a slow write in a loop's body and reads in
   an inner ``fori_loop`` or ``scan``, 3 runs each, scored against the
   bodies' stamps (truth, reported, what was left not compared).
5. entangle's cost in a 10,000-step scan over a 1024-vector vs identity,
   and that of a bare optimization_barrier (entangle's TPU lowering before
   0.5.0).

Writes OUT_DIR/tpu_check.json; prints one JSON line a section.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import statistics
import sys
import time

OUT = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "tpu-out")
DUMP = OUT / "dump"
os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "")
  + f" --xla_dump_to={DUMP} --xla_dump_hlo_as_text"
  + " --xla_dump_hlo_module_re=.*tpu_.*"
)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import io_callback  # noqa: E402

from entangle_jax import Resource, entangle, in_program_order  # noqa: E402
from entangle_jax import testing as ej_testing  # noqa: E402
from entangle_jax.testing._sanitize.session import format_seen  # noqa: E402

K = 8
STATE = [0.0] * K
LOG: list[tuple[str, int]] = []
I32 = jax.ShapeDtypeStruct((), jnp.int32)
F32 = jax.ShapeDtypeStruct((), jnp.float32)
CPU = jax.devices("cpu")[0]


def _w(k, kind, val, *_):
  LOG.append((kind, k))
  STATE[k] = float(val)
  return np.int32(0)


def _r(k, *_):
  LOG.append(("r", k))
  time.sleep(0.002)
  return np.float32(STATE[k])


def hazard(order: str, groups: int = K):
  """The hazard's function for `order` (see the module docstring)."""
  o = order == "ordered"

  def f(x):
    outs = []
    for k in range(groups):
      if order == "resource":
        res = Resource(jnp.int32(0) + (x * 0).astype(jnp.int32), name=f"s{k}")
        res.write(
          lambda t, v, k=k: io_callback(
            functools.partial(_w, k, "w1"), I32, v, t
          ),
          x + 1.0,
        )
        r = res.read(
          lambda t, k=k: io_callback(functools.partial(_r, k), F32, t)
        )
        res.write(
          lambda t, v, k=k: io_callback(
            functools.partial(_w, k, "w2"), I32, v, t
          ),
          x + 2.0,
        )
        outs.append(r)
        continue
      t = io_callback(functools.partial(_w, k, "w1"), I32, x + 1.0, ordered=o)
      r = io_callback(functools.partial(_r, k), F32, t, ordered=o)
      t2 = entangle(t, r) if order == "entangle" else t
      second = (x + 2.0) + t2.astype(jnp.float32) * 0
      if order == "data":
        second = second + r * 0
      io_callback(functools.partial(_w, k, "w2"), I32, second, ordered=o)
      outs.append(r)
    return jnp.stack(outs)

  f.__name__ = f"tpu_hazard_{order}"
  f.__qualname__ = f.__name__
  return in_program_order(f) if order == "ipo" else f


ORDERS = ("none", "entangle", "resource", "ipo", "ordered", "data")
PROGRAM = [(kind, k) for k in range(K) for kind in ("w1", "r", "w2")]


def out_of_order(log: list[tuple[str, int]]) -> dict:
  """Pairs of callbacks that ran in the reverse of program order: within a
  group (the hazard's own pairs), across groups."""
  place = {c: n for n, c in enumerate(log)}
  within = across = 0
  for a in range(len(PROGRAM)):
    for b in range(a + 1, len(PROGRAM)):
      x, y = PROGRAM[a], PROGRAM[b]
      if x in place and y in place and place[x] > place[y]:
        if x[1] == y[1]:
          within += 1
        else:
          across += 1
  return {"within_group": within, "across_groups": across}


def hazard_counts(
  runs: int = int(os.environ.get("TPU_CHECK_RUNS", "20")),
) -> dict:
  out = {}
  for order in ORDERS:
    f = jax.jit(hazard(order))
    jax.block_until_ready(f(jnp.float32(0)))
    wrong = 0
    orders = []
    for _ in range(runs):
      STATE[:] = [0.0] * K
      LOG.clear()
      wrong += int(np.sum(np.asarray(f(jnp.float32(0))) != 1.0))
      orders.append(out_of_order(list(LOG)))
    out[order] = {
      "wrong": f"{wrong}/{runs * K}",
      "out_of_program_order_first_run": orders[0],
      "runs_with_cross_group_inversions": sum(
        1 for o in orders if o["across_groups"]
      ),
      "last_run_log": [f"{kind}{k}" for kind, k in LOG[: 3 * K]],
    }
  return out


def pairs(x) -> int:
  return len(ej_testing.races(x))


def races_on_modules() -> dict:
  out = {}
  x = jnp.float32(0)
  for order in ORDERS:
    f = jax.jit(hazard(order))
    lowered = f.lower(x)
    cpu = jax.jit(hazard(order)).lower(jax.device_put(x, CPU)).compile()
    out[order] = {
      "tpu_compiled": pairs(lowered.compile()),
      "tpu_lowered": pairs(lowered),
      "cpu_compiled": pairs(cpu),
    }
  return out


def _named(name, f):
  f.__name__ = f.__qualname__ = name
  return f


def further_programs() -> dict:
  """Host-callback programs beyond the hazard: run on the TPU (dumped),
  compiled for CPU (dumped too); pairs on each."""
  sink: list = []

  def put(tag):
    def cb(*a):
      sink.append(tag)
      return np.int32(0)

    return cb

  def get(tag):
    def cb(*a):
      sink.append(tag)
      return np.float32(1)

    return cb

  def two_in_two_out(*a):
    sink.append("2x2")
    return np.float32(1), np.int32(2)

  def big(v):
    sink.append("big")
    return np.float32(np.sum(v))

  progs = {
    "tpu_two_operands_two_results": lambda x: (
      lambda r: io_callback(put("after"), I32, r[0] + r[1].astype(jnp.float32))
    )(io_callback(two_in_two_out, (F32, I32), x, x * 2)),
    "tpu_two_unordered_writes": lambda x: (
      io_callback(put("a"), I32, x),
      io_callback(put("b"), I32, x + 1),
    ),
    "tpu_debug_callbacks": lambda x: (
      jax.debug.callback(lambda v: sink.append("d1"), x),
      jax.debug.callback(lambda v: sink.append("d2"), x + 1),
      x + 2,
    )[2],
    "tpu_pure_and_io": lambda x: io_callback(
      put("io"), I32, jax.pure_callback(get("pure"), F32, x)
    ),
    "tpu_pure_pair": lambda x: (
      jax.pure_callback(get("p1"), F32, x)
      + jax.pure_callback(get("p2"), F32, x + 1)
    ),
    "tpu_no_operand": lambda x: (
      io_callback(get("n1"), F32),
      io_callback(put("n2"), I32, x),
    ),
    "tpu_ordered_chain": lambda x: (
      io_callback(put("o1"), I32, x, ordered=True),
      io_callback(put("o2"), I32, x + 1, ordered=True),
      io_callback(put("o3"), I32, x + 2, ordered=True),
    ),
    "tpu_data_chain": lambda x: io_callback(
      put("c3"),
      I32,
      io_callback(put("c2"), I32, io_callback(put("c1"), I32, x)),
    ),
    "tpu_entangle_pair": lambda x: (
      lambda a: io_callback(put("e2"), I32, entangle(x + 1, a))
    )(io_callback(put("e1"), I32, x)),
    # The same pair with a 4-vector payload (a scalar one goes into
    # entangle's Pallas kernel padded to 2 elements).
    "tpu_entangle_pair_vector": lambda x: (
      lambda a: io_callback(put("v2"), I32, entangle(jnp.full((4,), x), a))
    )(io_callback(put("v1"), I32, x)),
    "tpu_loop_then_read": lambda x: (
      lambda c: io_callback(get("after_loop"), F32, c)
    )(
      jax.lax.fori_loop(
        0,
        4,
        lambda i, c: c + io_callback(put("in_loop"), I32, c).astype(c.dtype),
        x,
      )
    ),
    "tpu_loop_and_unordered_read": lambda x: (
      jax.lax.fori_loop(
        0,
        4,
        lambda i, c: c + io_callback(put("in_loop"), I32, c).astype(c.dtype),
        x,
      ),
      io_callback(get("beside_loop"), F32, x),
    ),
    "tpu_cond": lambda x: (
      jax.lax.cond(
        x > 0,
        lambda v: io_callback(put("yes"), I32, v),
        lambda v: io_callback(put("no"), I32, v),
        x,
      )
      + io_callback(put("after_cond"), I32, x)
    ),
    "tpu_big_operands": lambda x: (
      io_callback(big, F32, jnp.full((1024,), x)),
      io_callback(big, F32, jnp.full((1 << 20,), x)),
    ),
  }
  out: dict[str, dict] = {}
  for name, fn in progs.items():
    f = jax.jit(_named(name, fn))
    try:
      sink.clear()
      jax.block_until_ready(f(jnp.float32(1)))
      lowered = f.lower(jnp.float32(1))
      cpu = jax.jit(_named(name, fn)).lower(jax.device_put(jnp.float32(1), CPU))
      out[name] = {
        "tpu_lowered": pairs(lowered),
        "tpu_compiled": pairs(lowered.compile()),
        "cpu": pairs(cpu.compile()),
        "ran": list(sink),
      }
    except Exception as e:  # One program's failure is a finding, not a stop.
      out[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
  # How often each entangled pair runs against its order, in 20 runs.
  for name, first, second in (
    ("tpu_entangle_pair", "e1", "e2"),
    ("tpu_entangle_pair_vector", "v1", "v2"),
  ):
    f = jax.jit(_named(name, progs[name]))
    against = 0
    for _ in range(20):
      sink.clear()
      jax.block_until_ready(f(jnp.float32(1)))
      against += sink.index(second) < sink.index(first)
    out[name]["second_ran_first"] = f"{against}/20"
  return out


def sanitizer() -> dict:
  out = {}
  for order in ("none", "entangle", "ipo", "ordered"):
    with ej_testing.sanitize() as seen:
      f = jax.jit(hazard(order))
      for _ in range(3):
        jax.block_until_ready(f(jnp.float32(0)))
    out[order] = {
      "calls": len(seen.calls),
      "races": len(seen.races),
      "not_observed": list(seen.not_observed),
      "unknown_places": seen.unknown_places,
      "report_head": format_seen(seen).splitlines()[:4],
    }
  return out


def _iteration(call, when: dict, tag: str) -> list[int]:
  """The (run, iteration) whose body stamp of `tag` lies in `call`'s
  window ([-1, -1]: none)."""
  for (t, r, i), at in when.items():
    if t == tag and call.start_ns <= at <= call.end_ns:
      return [r, i]
  return [-1, -1]


def _record(call) -> dict:
  """One recorded call, as the sanitizer saw it before placing it."""
  site = call.site
  return {
    "function": call.function,
    "target": call.target,
    "platform": call.platform,
    "thread": call.thread,
    "start_ns": call.start_ns,
    "end_ns": call.end_ns,
    "module": site.module.name if site else None,
    "module_serial": site.module.serial if site else None,
    "one_device": site.module.one_device if site else None,
    # Each loop's trip count, where the module states it: what pairs an
    # inner loop's calls by iteration (`SanitizedModule.loop_trips`).
    "loop_trips": {str(k): v for k, v in site.module.loop_trips.items()}
    if site
    else None,
    "position": site.position if site else None,
    "pure": site.pure if site else None,
    "context": [[f.kind, f.construct, f.region] for f in site.context]
    if site
    else None,
  }


def sanitizer_loops() -> dict:
  """Host callbacks in loops, scored per iteration against what their
  bodies saw: each body stamps (its name, the iteration, the run, the
  clock the sanitizer reads) so each recorded call is matched to its
  iteration, and an iteration whose read's body ran before its write's
  raced. ``truth`` and ``reported`` are (run, iteration) lists."""
  out = {}
  stamps: list[tuple[str, int, int, int]] = []
  run = [0]

  def stamp(tag, i):
    stamps.append((tag, int(i), run[0], time.monotonic_ns()))

  def probe(x, i):
    return np.float32(x)

  def slow_write(x, i):
    time.sleep(0.001)
    stamp("w", i)
    return np.float32(x)

  def read(x, i):
    stamp("r", i)
    return np.float32(x)

  def log(x, i):
    stamp("r", i)

  def pure_first(x):
    def body(i, x):
      p = jax.pure_callback(probe, F32, x, i)
      a = io_callback(slow_write, F32, x + p, i)
      b = io_callback(read, F32, x, i)
      return a + b

    return jax.lax.fori_loop(0, 15, body, x)

  def two(ordered):
    def f(x):
      def body(i, x):
        a = io_callback(slow_write, F32, x, i, ordered=ordered)
        b = io_callback(read, F32, x, i, ordered=ordered)
        return a + b

      return jax.lax.fori_loop(0, 3, body, x)

    return f

  def with_log(x):
    # The read is a jax.debug.callback: it returns nothing, and the device
    # does not wait for it.
    def body(i, x):
      a = io_callback(slow_write, F32, x, i)
      jax.debug.callback(log, x, i)
      return a

    return jax.lax.fori_loop(0, 4, body, x)

  def two_loops(x):
    # A loop's writes, then another loop's reads: no iteration joins them.
    x = jax.lax.fori_loop(
      0, 3, lambda i, x: io_callback(slow_write, F32, x, i), x
    )
    return jax.lax.fori_loop(0, 3, lambda i, x: io_callback(read, F32, x, i), x)

  for name, fn, runs in (
    ("pure_first_once", pure_first, 1),
    ("pure_first_x3", pure_first, 3),
    ("two_unordered_x3", two(False), 3),
    ("two_ordered_x3", two(True), 3),
    ("debug_callback_x3", with_log, 3),
    ("two_loops_x3", two_loops, 3),
  ):
    del stamps[:]
    with ej_testing.sanitize() as seen:
      g = jax.jit(fn)
      for r in range(runs):
        run[0] = r
        jax.block_until_ready(g(jnp.float32(1.0)))
    jax.effects_barrier()
    when = {}
    for tag, i, r, t in stamps:
      when[(tag, r, i)] = t
    truth = sorted(
      [r, i] for (tag, r, i), t in when.items()
      if tag == "r" and ("w", r, i) in when and t < when[("w", r, i)]
    )  # fmt: skip

    reported = sorted(
      {
        tuple(_iteration(c, when, "r"))
        for race in seen.races
        for c in (race.first, race.second)
        if c.function and c.function.rsplit(".", 1)[-1] in ("read", "log")
      }
    )
    out[name] = {
      # The calls as recorded and the bodies' stamps, for a hermetic test
      # that replays them (tests/sanitize/tpu_records_test.py).
      "records": [_record(c) for c in seen.calls],
      "stamps": [list(s) for s in stamps],
      "callbacks_ran": len(stamps),
      "truth": truth,
      "reported": [list(x) for x in reported],
      "races": len(seen.races),
      "race_kinds": sorted({r.kind for r in seen.races}),
      "threads": len({c.thread for c in seen.calls}),
      "unknown_runs": seen.unknown_runs,
      "unknown_runs_why": dict(seen.unknown_runs_why),
      "unpaired": [[u.calls, u.why] for u in seen.unpaired],
      "unknown_places": seen.unknown_places,
      "functions": sorted(
        {getattr(c, "function", "?") or "?" for c in seen.calls}
      ),
      "report_head": format_seen(seen).splitlines()[:3],
    }
  return out


def sanitizer_nested() -> dict:
  """Host callbacks in nested loops (issue 78): a slow write in an outer
  loop's body, then reads in an inner loop (or a ``scan``) that nothing
  orders after it. Each body stamps (tag, outer iteration, inner
  iteration, run, clock); a read whose stamp came before its outer
  iteration's write raced. ``truth`` and ``reported`` are [run, outer,
  inner] lists; ``unpaired`` says what the sanitizer could not pair (on
  CPU each loop's iterations are recorded; elsewhere it may be none)."""
  out = {}
  stamps: list[tuple[str, int, int, int, int]] = []
  run = [0]

  def slow_write(x, i):
    time.sleep(0.001)
    stamps.append(("w", int(i), -1, run[0], time.monotonic_ns()))
    return np.float32(x)

  def read(x, i, j):
    stamps.append(("r", int(i), int(j), run[0], time.monotonic_ns()))
    return np.float32(x)

  big = jnp.ones(1 << 18, jnp.float32)

  def late(x):
    # x, once a computation that takes a while is done: the write waits
    # for it, the reads do not.
    return x + jnp.sum(jnp.sin(big * x)) * 0.0

  def fori_in_fori(x):
    def body(i, x):
      w = io_callback(slow_write, F32, late(x), i)
      r = jax.lax.fori_loop(
        0, 2, lambda j, y: y + io_callback(read, F32, x, i, j), x
      )
      return w + r

    return jax.lax.fori_loop(0, 3, body, x)

  def scan_in_fori(x):
    def body(i, x):
      w = io_callback(slow_write, F32, late(x), i)

      def step(y, j):
        return y + io_callback(read, F32, x, i, j), None

      return w + jax.lax.scan(step, x, jnp.arange(2))[0]

    return jax.lax.fori_loop(0, 3, body, x)

  def fori_in_fori_ordered(x):
    # The control: the reads take the write's result, so data orders each
    # after its outer iteration's write; no read may be reported.
    def body(i, x):
      w = io_callback(slow_write, F32, late(x), i)
      return jax.lax.fori_loop(
        0, 2, lambda j, y: y + io_callback(read, F32, w, i, j), w
      )

    return jax.lax.fori_loop(0, 3, body, x)

  def log(x, i, j):
    read(x, i, j)

  def debug_in_fori(x):
    # The reads are jax.debug.callback: the device does not wait for
    # them (on the TPU they ran before the io_callback made first).
    def body(i, x):
      w = io_callback(slow_write, F32, late(x), i)

      def each(j, y):
        jax.debug.callback(log, x, i, j)
        return y

      return w + jax.lax.fori_loop(0, 2, each, x)

    return jax.lax.fori_loop(0, 3, body, x)

  for name, fn in (
    ("fori_in_fori_x3", fori_in_fori),
    ("fori_in_fori_ordered_x3", fori_in_fori_ordered),
    ("scan_x3", scan_in_fori),
    ("debug_in_fori_x3", debug_in_fori),
  ):
    del stamps[:]
    with ej_testing.sanitize() as seen:
      g = jax.jit(fn)
      for r in range(3):
        run[0] = r
        jax.block_until_ready(g(jnp.float32(1.0)))
    jax.effects_barrier()
    writes = {(r, i): t for tag, i, _, r, t in stamps if tag == "w"}
    truth = sorted(
      [r, i, j]
      for tag, i, j, r, t in stamps
      if tag == "r" and (r, i) in writes and t < writes[(r, i)]
    )
    reported = sorted(
      {
        (r, i, j)
        for race in seen.races
        for c in (race.first, race.second)
        if c.function and c.function.rsplit(".", 1)[-1] in ("read", "log")
        for tag, i, j, r, t in stamps
        if tag == "r" and c.start_ns <= t <= c.end_ns
      }
    )
    out[name] = {
      # The calls as recorded and the bodies' stamps, for a hermetic test
      # that replays them (tests/sanitize/tpu_records_test.py).
      "records": [_record(c) for c in seen.calls],
      "stamps": [list(s) for s in stamps],
      "callbacks_ran": len(stamps),
      "truth": truth,
      "reported": [list(x) for x in reported],
      "races": len(seen.races),
      "race_kinds": sorted({r.kind for r in seen.races}),
      "unknown_runs": seen.unknown_runs,
      "unpaired": [[u.calls, u.why] for u in seen.unpaired],
      "report_head": format_seen(seen).splitlines()[:3],
    }
  return out


def cost(steps: int = 10_000, repeats: int = 9) -> dict:
  def scan_with(step):
    def body(carry, _):
      p, w = carry
      return (step(p, w), w + 1), None

    return jax.jit(
      lambda p, w: jax.lax.scan(body, (p, w), None, length=steps)[0]
    )

  def median(fn):
    args = (jnp.zeros((1024,)), jnp.zeros(()))
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
      t = time.perf_counter()
      jax.block_until_ready(fn(*args))
      times.append(time.perf_counter() - t)
    return statistics.median(times)

  plain = median(scan_with(lambda p, w: p * 1.0001))
  tied = median(scan_with(lambda p, w: entangle(p * 1.0001, w)))
  barrier = median(
    scan_with(lambda p, w: jax.lax.optimization_barrier((p * 1.0001, w))[0])
  )
  return {
    "steps": steps,
    "identity_ms": plain * 1e3,
    "entangle_ms": tied * 1e3,
    "barrier_ms": barrier * 1e3,
    "ratio": tied / plain,
    "barrier_ratio": barrier / plain,
  }


def token_witness() -> dict:
  """``entangle(x, token)`` on the TPU: a Pallas kernel takes no token, so
  the call falls back to the barrier op (docs/platforms.md). Compiles and
  runs there, and gives the payload back bit for bit; the optimized
  module's ops that take the token."""
  from entangle_jax import entangle

  x = jnp.arange(8, dtype=jnp.float32) * 1.5

  def f(x):
    return entangle(x, jax.lax.create_token())

  compiled = jax.jit(f).lower(x).compile()
  out = np.asarray(compiled(x))
  text = compiled.as_text() or ""
  bits = np.asarray(x).view(np.int32)
  return {
    "same_bits": bool(np.array_equal(out.view(np.int32), bits)),
    "token_ops": [
      line.strip()[:160] for line in text.splitlines() if "token[]" in line
    ][:6],
  }


def main() -> int:
  OUT.mkdir(parents=True, exist_ok=True)
  import entangle_jax

  results: dict = {
    "jax": jax.__version__,
    "devices": [str(d) for d in jax.devices()],
    "entangle_jax": entangle_jax.__version__,
  }
  print(json.dumps(results), flush=True)
  for name, fn in (
    ("hazard", hazard_counts),
    ("races", races_on_modules),
    ("programs", further_programs),
    ("sanitizer", sanitizer),
    ("sanitizer_loops", sanitizer_loops),
    ("sanitizer_nested", sanitizer_nested),
    ("token_witness", token_witness),
    ("cost", cost),
  ):
    t = time.perf_counter()
    try:
      results[name] = fn()
    except Exception as e:  # Keep going: one section's failure is a finding.
      results[name] = {"error": f"{type(e).__name__}: {e}"[:800]}
    print(
      json.dumps(
        {name: results[name], "_s": round(time.perf_counter() - t, 1)}
      ),
      flush=True,
    )
  (OUT / "tpu_check.json").write_text(json.dumps(results, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
