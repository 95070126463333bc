"""The sanitizer on the shapes where one execution is one program (issue
68): a host callback between native calls, a jitted helper called twice,
a training step in a loop, and a read XLA hoisted out of its loop. Part of
``python -m benchmarks.sanitizer_shapes`` (`run`).

Each shape runs `RUNS` executions racy and made right, and is scored per
execution or per iteration against a run-time control that does not ask
the sanitizer: what the example store's reads returned. A host callback
clears the store (every slot back to 0.0), so a read the program makes
after the clear and that returned the write's value ran before it; a loop
that writes step ``i``'s value then reads it back sums to 21.0 over 7
steps only where each read followed its write. ``truth`` counts what the
reads show, ``hits`` what the sanitizer reported of it, ``false`` what it
reported beyond it; a made-right run can race nowhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback

from entangle_jax import entangle, in_program_order, testing

RUNS = 10
STEPS = 7
RIGHT_SUM = float(sum(range(STEPS)))
SLOT = jax.ShapeDtypeStruct((), jnp.int32)


def run(store) -> dict:
  """Every shape's figures, by name (`store`: the example store, imported
  while a sanitizer ran, so that its calls are recorded)."""

  clear = store.clear_in_callback

  def slow_zero(big):
    # Zero after a while: what takes it runs late, what does not runs
    # first.
    return (jnp.sum(jnp.sin(big)) * 0.0).astype(jnp.int32)

  def between(s, big):
    t = store.write_slot(s, 1.0)
    io_callback(clear, SLOT, t + slow_zero(big))
    return store.read_slot(t)  # After the clear in the program: 0.0.

  def between_chained(s, big):
    t = store.write_slot(s, 1.0)
    return store.read_slot(io_callback(clear, SLOT, t + slow_zero(big)))

  @jax.jit
  def helper(t):
    return io_callback(clear, SLOT, t)

  def helper_twice(chained):
    def f(s, big):
      t = store.write_slot(s, 1.0)
      c = helper(t + slow_zero(big))
      x = store.read_slot(c if chained else t)
      t = store.write_slot(entangle(c, x), 2.0)
      return x + store.read_slot(helper(t))  # The second read: 0.0.

    return f

  def step(s, big, chained):
    t = store.write_slot(s, 1.0)
    c = io_callback(clear, SLOT, t + slow_zero(big))
    return store.read_slot(c if chained else t)

  def in_scan(chained):
    def f(s, big):
      return lax.scan(
        lambda c, i: (c, step(s, big, chained)), 0, jnp.arange(STEPS)
      )[1]

    return f

  def in_while(chained):
    def f(s, big):
      def body(c):
        i, reads = c
        return i + 1, reads.at[i].set(step(s, big, chained))

      return lax.while_loop(
        lambda c: c[0] < STEPS, body, (0, jnp.zeros(STEPS))
      )[1]

    return f

  def hoisted(fixed):
    def f(s, big):
      def body(i, total):
        t = store.write_slot(s, i.astype(jnp.float32))
        return total + store.read_slot(t if fixed else s)

      return lax.fori_loop(0, STEPS, body, 0.0) + slow_zero(big)

    return f

  shapes = {
    "callback between native calls": (between, between_chained),
    "helper called twice": (helper_twice(False), helper_twice(True)),
    "training step in a scan": (in_scan(False), in_scan(True)),
    "training step in a while_loop": (in_while(False), in_while(True)),
    "read hoisted out of a loop": (hoisted(False), hoisted(True)),
  }
  # Also the racy programs as in_program_order makes them.
  shapes["callback between native calls, in_program_order"] = (
    between,
    in_program_order(between),
  )
  big = jnp.ones(1 << 19, jnp.float32)
  results = {}
  for name, (racy, right) in shapes.items():
    for variant, program in (("racy", racy), ("made right", right)):
      if variant == "racy" and name.endswith("in_program_order"):
        continue
      results[f"{name}/{variant}"] = _score(name, program, big)
  return results


def _score(name: str, program, big) -> dict:
  """Runs `program` `RUNS` times under the sanitizer and scores it: the
  truth from the reads, the races by execution (and iteration, by the
  rank of the read among its execution's reads)."""
  with testing.sanitize() as seen:
    g = jax.jit(program)
    outs = [np.asarray(g(jnp.int32(3), big)) for _ in range(RUNS)]
  first_start: dict[int, int] = {}
  for c in seen.calls:
    first_start.setdefault(c.run_id, c.start_ns)
  run_index = {
    r: k
    for k, r in enumerate(sorted(first_start, key=lambda r: first_start[r]))
  }
  reads: dict[int, list] = {}
  for c in sorted(seen.calls, key=lambda c: c.start_ns):
    if c.target.endswith("read_slot"):
      reads.setdefault(c.run_id, []).append(c)
  if name.startswith("read hoisted"):
    truth = {(k, 0) for k, out in enumerate(outs) if float(out) != RIGHT_SUM}
    got = {(run_index[r.first.run_id], 0) for r in seen.races}
  else:
    # A read that returned the write's value ran before the clear.
    truth = {
      (k, i) for k, out in enumerate(outs) for i, v in enumerate(np.ravel(out))
      if v != 0.0
    }  # fmt: skip
    got = set()
    for r in seen.races:
      read = r.second if r.second.target.endswith("read_slot") else r.first
      run = read.run_id
      got.add((run_index[run], reads[run].index(read)))
  return {
    "truth": len(truth),
    "hits": len(truth & got),
    "false": len(got - truth),
    "races": len(seen.races),
    "kinds": sorted({r.kind for r in seen.races}),
    "not_compared": sum(u.calls for u in seen.unpaired) + seen.unknown_runs,
  }
