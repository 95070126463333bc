"""The sanitizer's recall and false races on program shapes, each run
racy and ordered (``python -m benchmarks.sanitizer_shapes``; not part of
``python -m benchmarks``).

For the example store's shapes, the truth is what the reads saw: a read
that returned the second write's value (``wrong``) raced with it. The
sanitizer is scored per (execution, slot): ``race_objects`` counts the
distinct ones it reported. An ordered variant can race nowhere: any race
it reports is a false one. Host callbacks, threads and the undeclared
target are scored the same way where a read can show it, else by the
races of the racy variant against its ordered control. Prints JSON.
"""

import json
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback

from benchmarks import sanitizer_execution_shapes
from entangle_jax import entangle, testing


def main() -> dict:
  """Runs every shape; prints and returns the figures."""
  with testing.sanitize():
    from entangle_jax.testing import example_store as store
  RUNS = 10

  def hazard(slot, fixed):
    t = store.write_slot(slot, 1.0)
    x = store.read_slot(t, delay_us=200)
    if fixed:
      t = entangle(t, x)
    store.write_slot(t, 2.0)
    return x

  def straight(fixed):
    def f(big):
      return jnp.stack([hazard(s, fixed) for s in range(32)]), jnp.sum(
        jnp.sin(big)
      )

    return f

  def loop(fixed):
    def f(big):
      def body(i, acc):
        return acc.at[i].set(hazard(i, fixed))

      return lax.fori_loop(0, 16, body, jnp.zeros(16)), jnp.sum(jnp.sin(big))

    return f

  def branch(fixed):
    def f(big):
      xs = [
        lax.cond(
          s % 2 == 0, lambda s: hazard(s, fixed), lambda s: jnp.float32(1.0), s
        )
        for s in range(16)
      ]
      return jnp.stack(xs), jnp.sum(jnp.sin(big))

    return f

  def cond_in_loop(_):
    def f(big):
      def body(i, t):
        return lax.cond(
          i % 2 == 0,
          lambda t: store.write_slot(t, 1.0),
          lambda t: store.write_slot(t, 2.0),
          t,
        )

      return lax.fori_loop(0, 8, body, store.write_slot(40, 0.0)), jnp.sum(
        jnp.sin(big)
      )

    return f

  def vmap64(fixed):
    def f(big):
      slots = jnp.arange(64, dtype=jnp.int32)
      return jax.vmap(lambda s: hazard(s, fixed))(slots), jnp.sum(jnp.sin(big))

    return f

  def wrong_of(name, out):
    x = np.asarray(out[0])
    return int(np.sum(x != 1.0)) if name != "cond_in_loop" else 0

  def race_slots(seen):
    s = set()
    for r in seen.races:
      s.add((r.first.run_id, r.object.value))
    return s

  results = {}
  for name, make in [
    ("straight", straight),
    ("loop", loop),
    ("branch", branch),
    ("cond_in_loop", cond_in_loop),
    ("vmap64", vmap64),
  ]:
    for fixed in (False, True):
      with testing.sanitize() as seen:
        g = jax.jit(make(fixed))
        wrong = 0
        for _ in range(RUNS):
          out = g(jnp.ones(2000))
          x = np.asarray(out[0])
          if name != "cond_in_loop":
            wrong += int(np.sum(x != 1.0))
      results[f"{name}/{'fixed' if fixed else 'racy'}"] = {
        "wrong": wrong,
        "races": len(seen.races),
        "kinds": sorted({r.kind for r in seen.races}),
        "unpaired": sum(u.calls for u in seen.unpaired),
        "anything": seen.anything,
        "race_objects": len(
          {(r.first.run_id, r.object.value) for r in seen.races}
        ),
      }

  # host callbacks
  store_py = {}

  def w(x):
    time.sleep(0.002)
    store_py["v"] = x
    return x

  def rd(x):
    return np.float32(store_py.get("v", -1.0))

  def show(x):
    pass

  def cb(ordered):
    def f(x):
      shape = jax.ShapeDtypeStruct((), jnp.float32)
      a = io_callback(w, shape, x, ordered=ordered)
      b = io_callback(rd, shape, x, ordered=ordered)
      if not ordered:
        jax.debug.callback(show, x)
      return a + b

    return f

  for ordered in (False, True):
    with testing.sanitize() as seen:
      g = jax.jit(cb(ordered))
      for _ in range(RUNS):
        g(jnp.float32(1.0)).block_until_ready()
    results[f"host_callbacks/{'ordered' if ordered else 'racy'}"] = {
      "races": len(seen.races),
      "calls": len(seen.calls),
    }

  def pure(x):
    shape = jax.ShapeDtypeStruct((), jnp.float32)
    return jax.pure_callback(w, shape, x) + jax.pure_callback(rd, shape, x)

  with testing.sanitize() as seen:
    g = jax.jit(pure)
    for _ in range(RUNS):
      g(jnp.float32(1.0)).block_until_ready()
  results["pure_callback/pure"] = {
    "races": len(seen.races),
    "calls": len(seen.calls),
  }

  # threads: two executions on one slot, a write and a slow read each
  def two(v):
    def f(s):
      t = store.write_slot(s, v)
      x = store.read_slot(t, delay_us=2000)
      return x

    return jax.jit(f)

  fa, fb = two(1.0), two(2.0)
  fa(jnp.int32(50)).block_until_ready()
  fb(jnp.int32(50)).block_until_ready()

  def run_into(outs, f, k):
    outs[k] = float(f(jnp.int32(50)))

  for mode in ("threads", "serial"):
    wrong = 0
    with testing.sanitize(clear_caches=False) as seen:
      for _ in range(RUNS):
        outs: dict = {}
        if mode == "threads":
          ts = [
            threading.Thread(target=run_into, args=(outs, fa, 1.0)),
            threading.Thread(target=run_into, args=(outs, fb, 2.0)),
          ]
          for t in ts:
            t.start()
          for t in ts:
            t.join()
        else:
          run_into(outs, fa, 1.0)
          run_into(outs, fb, 2.0)
        wrong += sum(outs[k] != k for k in outs)
    results[f"threads/{mode}"] = {
      "wrong": wrong,
      "races": len(seen.races),
      "kinds": sorted({r.kind for r in seen.races}),
    }

  # undeclared target: the store's write handler under a name nobody declared

  with testing.sanitize():
    jax.ffi.register_ffi_target(
      "undeclared_write_slots",
      store._native.registrations()["write_slot"],
      platform="cpu",
    )

  def undeclared(fixed):
    def f(big):
      xs = []
      toks = []
      for s in range(16):
        t = store.write_slot(44 + s, 1.0)
        x = store.read_slot(t, delay_us=200)
        xs.append(x)
        toks.append(t)
      tok = jnp.stack(toks)
      if fixed:
        tok = entangle(tok, jnp.stack(xs))
      call = jax.ffi.ffi_call(
        "undeclared_write_slots",
        jax.ShapeDtypeStruct((16,), jnp.int32),
        has_side_effect=True,
      )
      call(tok, jnp.full(16, 2.0, jnp.float32), delay_us=np.int64(0))
      return jnp.stack(xs), jnp.sum(jnp.sin(big))

    return f

  for fixed in (False, True):
    with testing.sanitize() as seen:
      g = jax.jit(undeclared(fixed))
      wrong = 0
      for _ in range(RUNS):
        wrong += int(np.sum(np.asarray(g(jnp.ones(2000))[0]) != 1.0))
    results[f"undeclared/{'fixed' if fixed else 'racy'}"] = {
      "wrong": wrong,
      "races": len(seen.races),
      "race_objects": len(
        {(r.first.run_id, r.object.value) for r in seen.races}
      ),
      "anything": seen.anything,
    }
  # One execution, one program (issue 68): callbacks among native calls,
  # a helper called twice, loops, a hoisted read.
  results.update(sanitizer_execution_shapes.run(store))
  print(json.dumps(results, indent=1))
  return results


if __name__ == "__main__":
  main()
