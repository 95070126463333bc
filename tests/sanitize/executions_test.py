"""Native calls and host callbacks of one execution, compared by program
order (issue 68, defects 1 and 2), each shape beside its run-time control:
the value its reads returned, which says whether a read ran before or after
the host callback that clears the example store.

* A read that nothing orders after an ``io_callback`` that clears the store
  (the callback's operand is slow to compute, so XLA:CPU runs the read
  first): every execution whose read returned the value the callback clears
  is reported, "out of order", and no other (precision and recall 1.0).
* The same calls chained by data, and the racy program made right by
  ``in_program_order``: no wrong read, and no race.
* A jitted helper whose host callback clears the store, called twice (JAX
  lowers it once: both calls name one Python callable): each call has its
  own place; chained, no race; with the read after the first call not
  ordered after it, each execution whose read ran first is reported.
* ``jax.checkpoint`` of such a helper under ``grad`` (the forward call and
  its recomputation): each call its own place.

In a fresh interpreter, where the example store registers after the
sanitizer started.
"""

import json
import textwrap
from unittest import mock

from absl.testing import absltest

from entangle_jax._src.targets.names import SANITIZER_EXECUTION_TARGET
from entangle_jax.testing._sanitize import jax_hooks
from tests import test_util

RUNS = 6

PROGRAMS = textwrap.dedent(
  """
  import json, sys
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.experimental import io_callback
  from entangle_jax import entangle, in_program_order, testing

  with testing.sanitize():
    from entangle_jax.testing import example_store as store

  RUNS = int(sys.argv[1])
  SLOT = jax.ShapeDtypeStruct((), jnp.int32)

  clear = store.clear_in_callback  # Every slot back to 0.0.

  def slow_zero(big):
    # Zero, after a computation that takes a while: a call that takes it
    # runs late, and what does not wait for it runs first.
    return (jnp.sum(jnp.sin(big)) * 0.0).astype(jnp.int32)

  def racy(s, big):
    t = store.write_slot(s, 1.0)
    io_callback(clear, SLOT, t + slow_zero(big))
    return (store.read_slot(t),)  # Program order: after the clear (0.0).

  def chain(s, big):
    t = store.write_slot(s, 1.0)
    c = io_callback(clear, SLOT, t + slow_zero(big))
    return (store.read_slot(c),)

  @jax.jit
  def helper(t):
    return io_callback(clear, SLOT, t)

  def helper_chain(s, big):
    t = store.write_slot(s, 1.0)
    c = helper(t + slow_zero(big))
    x = store.read_slot(c)
    t = store.write_slot(entangle(c, x), 2.0)
    return x, store.read_slot(helper(t))

  def helper_racy(s, big):
    t = store.write_slot(s, 1.0)
    c = helper(t + slow_zero(big))
    x = store.read_slot(t)  # Not after the first call: it may run first.
    t = store.write_slot(entangle(c, x), 2.0)
    return x, store.read_slot(helper(t))

  def remat(x):
    def f(x):
      y = jax.checkpoint(helper_float)(x)
      return jnp.sin(y)
    return jax.grad(f)(x)

  @jax.jit
  def helper_float(x):
    jax.debug.callback(lambda v: None, x)
    return jnp.sin(x)

  SHAPES = {
    "racy": racy,
    "chain": chain,
    "fixed": in_program_order(racy),
    "helper_chain": helper_chain,
    "helper_racy": helper_racy,
  }

  def executions(seen):
    # Run id -> its index in the order the executions ran.
    first = {}
    for c in seen.calls:
      first.setdefault(c.run_id, c.start_ns)
    return {r: k for k, r in enumerate(sorted(first, key=first.get))}

  out = {}
  big = jnp.ones(1 << 20, jnp.float32)
  for name, f in SHAPES.items():
    with testing.sanitize() as seen:
      g = jax.jit(f)
      reads = [
        [float(v) for v in jax.device_get(g(jnp.int32(3), big))]
        for _ in range(RUNS)
      ]
    index = executions(seen)
    places = {}
    for c in seen.calls:
      places.setdefault(index[c.run_id], []).append(
        [c.site.position, c.function is not None]
      )
    out[name] = {
      "reads": reads,
      "races": [
        [r.kind, index[r.first.run_id], r.first.site.position,
         r.second.site.position]
        for r in seen.races
      ],
      "places": [sorted(places[k]) for k in range(len(places))],
      "unpaired": sum(u.calls for u in seen.unpaired),
      "unknown_runs": seen.unknown_runs,
      "report": seen.report(file=sys.stderr),
    }
  with testing.sanitize() as seen:
    g = jax.jit(remat)
    for _ in range(2):
      jax.block_until_ready(g(jnp.float32(1.0)))
  index = executions(seen)
  places = {}
  for c in seen.calls:
    places.setdefault(index[c.run_id], []).append(c.site.position)
  out["remat"] = {
    "places": [sorted(places[k]) for k in range(len(places))],
    "report": seen.report(file=sys.stderr),
  }
  print(json.dumps(out))
  """
)


class ExecutionsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    run = test_util.run_python(PROGRAMS, str(RUNS), timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def assert_matches_control(self, name, wrong_value, first, second):
    """The executions whose read returned `wrong_value` at read
    `first`... are exactly those reported out of order between places
    `first` and `second`, and nothing else is reported."""
    shape = self.out[name]
    wrong = {
      k for k, reads in enumerate(shape["reads"]) if reads[0] == wrong_value
    }
    reported = {
      k
      for kind, k, p, q in shape["races"]
      if kind == "out of order" and (p, q) == (first, second)
    }
    self.assertEqual(reported, wrong, shape["report"])
    self.assertEqual(len(shape["races"]), len(wrong), shape["report"])
    self.assertEqual(shape["unpaired"], 0, shape["report"])
    self.assertEqual(shape["unknown_runs"], 0, shape["report"])
    return wrong

  def test_a_read_that_ran_before_the_callback_is_reported(self):
    # The control: the read ran before the clear (it returned the write's
    # 1.0) in some execution, else this shows nothing.
    wrong = self.assert_matches_control("racy", 1.0, 1, 2)
    self.assertTrue(wrong, self.out["racy"]["reads"])
    # Each execution's write, callback and read, each at its place, the
    # callback among them (one execution: one program).
    for places in self.out["racy"]["places"]:
      self.assertEqual(places, [[0, False], [1, True], [2, False]])

  def test_the_same_calls_chained_give_no_race(self):
    for name in ("chain", "fixed"):
      shape = self.out[name]
      # The control: every read ran after the clear.
      self.assertEqual({r[0] for r in shape["reads"]}, {0.0}, name)
      self.assertEqual(shape["races"], [], shape["report"])
      self.assertEqual(shape["unpaired"], 0, shape["report"])
      self.assertEqual(shape["unknown_runs"], 0, shape["report"])
      self.assertIn("0 races", shape["report"])

  def test_a_helper_called_twice_has_a_place_for_each_call(self):
    for name in ("helper_chain", "helper_racy"):
      for places in self.out[name]["places"]:
        # Write, callback, read, write, callback, read: the two calls of
        # the helper's one callable at places 1 and 4.
        self.assertEqual(
          places,
          [[0, False], [1, True], [2, False], [3, False], [4, True],
           [5, False]],
        )  # fmt: skip
    chain = self.out["helper_chain"]
    # The control: both reads after their clear, in every execution.
    self.assertEqual({tuple(r) for r in chain["reads"]}, {(0.0, 0.0)})
    self.assertEqual(chain["races"], [], chain["report"])

  def test_a_read_before_the_helpers_first_call_is_reported(self):
    racy = self.out["helper_racy"]
    # The second read is ordered after the second call: always 0.0.
    self.assertEqual({r[1] for r in racy["reads"]}, {0.0})
    wrong = self.assert_matches_control("helper_racy", 1.0, 1, 2)
    self.assertTrue(wrong, racy["reads"])

  def test_a_recomputed_checkpoint_has_a_place_for_each_call(self):
    remat = self.out["remat"]
    self.assertLen(remat["places"], 2)
    for places in remat["places"]:
      # The forward call and its recomputation: two places, one call each.
      self.assertLen(places, 2, remat["report"])
      self.assertLen(set(places), 2, remat["report"])


class RefusedTest(absltest.TestCase):
  def test_a_module_xla_refuses_is_compiled_the_old_way(self):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import io_callback

    from entangle_jax import testing

    compiler = jax_hooks.compiler_module()
    compile_ = getattr(compiler, jax_hooks.COMPILE)
    refused = []

    def refusing(backend, computation, *args, **kwargs):
      # An XLA that refuses the execution op (as an older one might).
      if SANITIZER_EXECUTION_TARGET in str(computation):
        refused.append(True)
        raise RuntimeError("refused")
      return compile_(backend, computation, *args, **kwargs)

    seen_by_callback = []

    def note(x):
      seen_by_callback.append(float(x))
      return np.float32(x)

    def f(x):
      return io_callback(note, jax.ShapeDtypeStruct((), jnp.float32), x) + 1

    with (
      mock.patch.object(compiler, jax_hooks.COMPILE, refusing),
      testing.sanitize() as seen,
    ):
      out = jax.jit(f)(jnp.float32(2.0))
    # It compiled and ran all the same, its callback as the user wrote it
    # (no operand of the sanitizer's), and recorded by its index.
    self.assertEqual(refused, [True])
    self.assertEqual(float(out), 3.0)
    self.assertEqual(seen_by_callback, [2.0])
    self.assertLen(seen.calls, 1)
    self.assertEqual(
      seen.calls[0].function,
      "RefusedTest."
      "test_a_module_xla_refuses_is_compiled_the_old_way.<locals>.note",
    )
    # The control: unrefused, the callback took the sanitizer's operands
    # and was recorded in XLA's execution (a positive run id, where the
    # old way counts executions down from -1).
    seen_by_callback.clear()
    with testing.sanitize() as seen:
      jax.jit(f)(jnp.float32(2.0)).block_until_ready()
    self.assertEqual(seen_by_callback, [2.0])
    self.assertLen(seen.calls, 1)
    self.assertNotEqual(seen.calls[0].run_id, -1)


if __name__ == "__main__":
  absltest.main()
