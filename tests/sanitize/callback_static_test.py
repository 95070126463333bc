"""A host callback's race reads like a native one (issue 78, defect 2):
both calls with their file:line and thread, the static check's line from
the user's own module, and the fix the static report gives for the pair;
applying that fix (the later call consumes the earlier one's result
through ``entangle``) leaves no race. Each shape beside its run-time
control: the value its read returned, which says whether the read ran
before or after the callback that the program made first.

* A native read that nothing orders after an ``io_callback`` that clears
  the example store.
* Two ``io_callback``s, the first setting Python state, the second reading
  it, unordered (the first's operand is slow to compute).

In a fresh interpreter, where the example store registers after the
sanitizer started.
"""

import json
import textwrap

from absl.testing import absltest

from tests import test_util

RUNS = 6

PROGRAMS = textwrap.dedent(
  """
  import json, sys
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.experimental import io_callback
  from entangle_jax import entangle, testing

  with testing.sanitize():
    from entangle_jax.testing import example_store as store

  RUNS = int(sys.argv[1])
  SLOT = jax.ShapeDtypeStruct((), jnp.int32)
  F32 = jax.ShapeDtypeStruct((), jnp.float32)
  state = {"v": 0.0}

  def slow_zero(big):
    return (jnp.sum(jnp.sin(big)) * 0.0).astype(jnp.int32)

  def set_one(x):
    state["v"] = 1.0
    return np.int32(0)

  def get(x):
    return np.float32(state["v"])

  def native_racy(s, big):
    t = store.write_slot(s, 1.0)
    io_callback(store.clear_in_callback, SLOT, t + slow_zero(big))
    return store.read_slot(t)  # Program order: after the clear (0.0).

  def native_fixed(s, big):
    # The fix as the static report words it: the later call's operand 0
    # consumes the earlier call's result through entangle.
    t = store.write_slot(s, 1.0)
    r = io_callback(store.clear_in_callback, SLOT, t + slow_zero(big))
    return store.read_slot(entangle(t, r))

  def host_racy(s, big):
    io_callback(set_one, SLOT, s + slow_zero(big))
    return io_callback(get, F32, s)  # Program order: after the set (1.0).

  def host_fixed(s, big):
    r = io_callback(set_one, SLOT, s + slow_zero(big))
    return io_callback(get, F32, entangle(s, r))

  SHAPES = {
    "native_racy": (native_racy, 1.0),
    "native_fixed": (native_fixed, 1.0),
    "host_racy": (host_racy, 0.0),
    "host_fixed": (host_fixed, 0.0),
  }

  out = {}
  big = jnp.ones(1 << 20, jnp.float32)
  for name, (f, wrong) in SHAPES.items():
    static = len(testing.races(jax.jit(f).lower(jnp.int32(3), big)))
    with testing.sanitize() as seen:
      g = jax.jit(f)
      reads = []
      for _ in range(RUNS):
        state["v"] = 0.0
        reads.append(float(jax.device_get(g(jnp.int32(3), big))))
    out[name] = {
      "wrong": sum(r == wrong for r in reads),
      "static": static,
      "races": [
        {
          "kind": r.kind,
          "callbacks": [c.function is not None for c in (r.first, r.second)],
          "sources": [c.site.source for c in (r.first, r.second)],
          "threads": [c.thread for c in (r.first, r.second)],
          "finding": seen.static_finding(r),
          "fix": seen.static_fix(r),
        }
        for r in seen.races
      ],
      "report": seen.report(file=sys.stderr),
    }
  print(json.dumps(out))
  """
)


class CallbackStaticTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    run = test_util.run_python(PROGRAMS, str(RUNS), timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    cls.out = json.loads(run.stdout.strip().splitlines()[-1])

  def assert_actionable(self, name, callbacks):
    shape = self.out[name]
    # The control: the race happened (some read returned the wrong value),
    # else this shows nothing; each wrong read is one race.
    self.assertGreater(shape["wrong"], 0, shape["report"])
    self.assertLen(shape["races"], shape["wrong"], shape["report"])
    self.assertGreater(shape["static"], 0)
    for race in shape["races"]:
      self.assertEqual(race["kind"], "out of order", shape["report"])
      self.assertEqual(race["callbacks"], callbacks, shape["report"])
      for source in race["sources"]:
        self.assertRegex(source, r".+:\d+$")
      self.assertNotEqual(race["sources"][0], race["sources"][1])
      for thread in race["threads"]:
        self.assertGreater(thread, 0)
      self.assertEqual(
        race["finding"],
        "the static check reports them as may race, and they did",
      )
      self.assertRegex(race["fix"] or "", r"^EJ\d{3} .*Fix: .*entangle")
      self.assertIn(race["fix"], shape["report"])
      for source in race["sources"]:
        self.assertIn(f"at {source}", shape["report"])

  def test_a_callback_and_a_native_read_carry_the_static_line_and_fix(self):
    self.assert_actionable("native_racy", [True, False])

  def test_two_callbacks_carry_the_static_line_and_fix(self):
    self.assert_actionable("host_racy", [True, True])

  def test_the_fix_applied_leaves_no_race(self):
    for name in ("native_fixed", "host_fixed"):
      shape = self.out[name]
      # The control: every read ran after the callback made first.
      self.assertEqual(shape["wrong"], 0, shape["report"])
      self.assertEqual(shape["races"], [], shape["report"])
      self.assertEqual(shape["static"], 0, name)


if __name__ == "__main__":
  absltest.main()
