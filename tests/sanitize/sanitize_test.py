"""The run-time sanitizer (`entangle_jax.testing.sanitize`): what it sees
of real programs, each beside its control.

The programs run in fresh interpreters: the sanitizer wraps only the FFI
targets registered after it started, and a test process may have loaded
the example store or klujax before.
"""

import importlib.util
import json
import tempfile
import textwrap

from absl.testing import absltest

from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
)
from entangle_jax.testing._sanitize import checks, sites
from entangle_jax.testing._sanitize.calls import SanitizedCall, touches
from tests import test_util

_PRELUDE = """
import json, sys
import jax
import jax.numpy as jnp
import numpy as np
from entangle_jax import Resource, entangle, in_program_order, testing
"""

WIDE_HAZARD = _PRELUDE + textwrap.dedent(
  """
  SLOTS = 32
  with testing.sanitize():  # Starts it before the store registers.
    from entangle_jax.testing import example_store as store

  def hazard(slot, ordering):
    if ordering == "resource":
      res = Resource(jnp.int32(slot))
      res.write(store.write_slot, 1.0)
      x = res.read(lambda t: store.read_slot(t, delay_us=300))
      res.write(store.write_slot, 2.0)
      return x
    token = store.write_slot(slot, 1.0)
    x = store.read_slot(token, delay_us=300)
    if ordering == "entangle":
      token = entangle(token, x)
    store.write_slot(token, 2.0)
    return x

  def program(ordering):
    def run(big):
      reads = [hazard(s, ordering) for s in range(SLOTS)]
      return jnp.stack(reads), jnp.sum(jnp.sin(big))
    return in_program_order(run) if ordering == "in_program_order" else run

  out = {}
  for ordering in ("none", "entangle", "resource", "in_program_order"):
    with testing.sanitize() as seen:
      f = jax.jit(program(ordering))
      wrong = 0
      for _ in range(5):
        reads = f(jnp.ones(1000, jnp.float32))[0]
        wrong += int(np.sum(np.asarray(reads) != 1.0))
    out[ordering] = {
      "wrong": wrong,
      "calls": len(seen.calls),
      "kinds": sorted({r.kind for r in seen.races}),
      "races": len(seen.races),
      "unknown": seen.unknown_places,
      "report": seen.report(file=sys.stderr),
    }
  print(json.dumps(out))
  """
)

KLUJAX = _PRELUDE + textwrap.dedent(
  """
  jax.config.update("jax_enable_x64", True)
  if sys.argv[1] == "before":
    import klujax  # Registered before the sanitizer starts.

  N, SOLVES = 400, 12

  def solves(b, num, sym, fixed):
    out = []
    for k in range(SOLVES):
      x = klujax.solve_with_numeric(num, (k + 1) * b, sym)
      if fixed:
        num = entangle(num, x)
      out.append(x)
    return out

  def run(fixed):
    with testing.sanitize() as seen:
      f = jax.jit(lambda b, num, sym: solves(b, num, sym, fixed))
      for _ in range(10):
        jax.block_until_ready(f(jnp.ones(N), num, sym))
    return {
      "calls": len([c for c in seen.calls if "solve" in c.target]),
      "races": len(seen.races),
      "objects": sorted({str(r.object) for r in seen.races}),
      "static": sorted({seen.static_finding(r) or "" for r in seen.races}),
      "not_observed": seen.not_observed,
    }

  with testing.sanitize():
    import klujax
    diagonal = jnp.arange(N, dtype=jnp.int32)
    ai = jnp.concatenate([diagonal, diagonal[1:]])
    aj = jnp.concatenate([diagonal, diagonal[:-1]])
    ax = jnp.concatenate([4.0 * jnp.ones(N), jnp.ones(N - 1)])
    symbolic = klujax.analyze(ai, aj, N)
    numeric = klujax.factor(ai, aj, ax, symbolic)
  num = jnp.array(numeric.as_list(), dtype=jnp.uint64)
  sym = jnp.array(symbolic.raw, dtype=jnp.uint64)
  print(json.dumps({"handle": int(num[0]), "unfixed": run(False),
                    "fixed": run(True)}))
  """
)

CONTRADICTION = _PRELUDE + textwrap.dedent(
  """
  from entangle_jax import declare_target
  with testing.sanitize():
    from entangle_jax.testing import example_store as store
  # Different elements of a slot array are declared different slots.
  declare_target(store.WRITE_SLOT_TARGET, mode="write", object=0,
                 returns_object=[0], distinct_elements=True)

  def program(slots):
    first = store.write_slot(slots[0], 1.0)
    second = store.write_slot(slots[1], 2.0)
    both = store.write_slot(slots, jnp.ones(2, jnp.float32))
    return first, second, both

  out = {}
  for name, slots in (("same", [3, 3]), ("different", [3, 4])):
    with testing.sanitize() as seen:
      f = jax.jit(program)
      jax.block_until_ready(f(jnp.array(slots, jnp.int32)))
    out[name] = [
      [c.first.target, c.second is c.first, c.object.value]
      for c in seen.contradictions
    ]
    out[name + "_report"] = seen.report(file=sys.stderr)
  print(json.dumps(out))
  """
)

NAMED_APART = _PRELUDE + textwrap.dedent(
  """
  with testing.sanitize():
    from entangle_jax.testing import example_store as store

  # The caller's word that the two arguments are different slots.
  @in_program_order(distinct_arguments=True)
  def program(a, b):
    ta, tb = store.write_slot(a, 1.0), store.write_slot(b, 2.0)
    return store.read_slot(ta), store.read_slot(tb)

  out = {}
  for name, slots in (("same", (5, 5)), ("different", (5, 6))):
    with testing.sanitize() as seen:
      f = jax.jit(program)
      jax.block_until_ready(f(*map(jnp.int32, slots)))
    out[name] = sorted(
      (c.declaration, c.object.value) for c in seen.contradictions
    )
  print(json.dumps(out))
  """
)

HOST_CALLBACKS = _PRELUDE + textwrap.dedent(
  """
  import time
  from jax.experimental import io_callback

  store = {}

  def write(x):
    time.sleep(0.005)
    store["v"] = x
    return x

  def read(x):
    return np.float32(store.get("v", -1.0))

  def show(x):
    pass

  def program(ordering):
    def run(x):
      shape = jax.ShapeDtypeStruct((), jnp.float32)
      ordered = ordering == "ordered"
      a = io_callback(write, shape, x, ordered=ordered)
      if ordering == "entangle":
        x = entangle(x, a)
      b = io_callback(read, shape, x, ordered=ordered)
      if ordering == "none":
        jax.debug.callback(show, x)
      return a + b
    return run

  out = {}
  for ordering in ("none", "ordered", "entangle"):
    with testing.sanitize() as seen:
      f = jax.jit(program(ordering))
      for _ in range(3):
        f(jnp.float32(1.0)).block_until_ready()
    out[ordering] = {
      "calls": [
        [c.target, c.function, c.platform, c.thread, c.start_ns, c.end_ns,
         c.site.position if c.site else None, c.place]
        for c in seen.calls
      ],
      "kinds": sorted({r.kind for r in seen.races}),
      "races": len(seen.races),
      "objects": sorted({str(r.object) for r in seen.races}),
      "functions": sorted(
        {f for r in seen.races for f in (r.first.function, r.second.function)}
      ),
      "not_observed": seen.not_observed,
      "unknown": seen.unknown_places,
      "report": seen.report(file=sys.stderr),
    }
  print(json.dumps(out))
  """
)


def run_json(test: absltest.TestCase, source: str, *args: str) -> dict:
  run = test_util.run_python(source, *args, timeout=300)
  test.assertEqual(run.returncode, 0, run.stderr[-4000:])
  return json.loads(run.stdout.strip().splitlines()[-1])


class WideHazardTest(absltest.TestCase):
  def test_races_without_ordering_and_none_with_each_fix(self):
    out = run_json(self, WIDE_HAZARD)
    none = out["none"]
    # 32 hazards x 3 calls x 5 runs, each call with its place.
    self.assertEqual(none["calls"], 480)
    self.assertEqual(none["unknown"], 0)
    self.assertGreater(none["races"], 0, none["report"])
    self.assertIn("out of order", none["kinds"])
    self.assertIn("out of order", none["report"])
    for fixed in ("entangle", "resource", "in_program_order"):
      with self.subTest(fixed):
        self.assertEqual(out[fixed]["calls"], 480)
        self.assertEqual(out[fixed]["wrong"], 0)
        self.assertEqual(out[fixed]["races"], 0, out[fixed]["report"])


@absltest.skipUnless(
  importlib.util.find_spec("klujax") is not None,
  "klujax is not installed (pip install klujax==0.5.2)",
)
class KlujaxTest(absltest.TestCase):
  def test_shared_handle_races_and_the_fix_has_none(self):
    out = run_json(self, KLUJAX, "after")
    unfixed, fixed = out["unfixed"], out["fixed"]
    self.assertEqual(unfixed["calls"], 120)
    self.assertGreater(unfixed["races"], 0)
    # All on the one numeric handle, as the static check said they may.
    self.assertEqual(unfixed["objects"], [f"klujax object {out['handle']:#x}"])
    self.assertEqual(
      unfixed["static"],
      ["the static check reports them as may race, and they did"],
    )
    self.assertEqual(fixed["calls"], 120)
    self.assertEqual(fixed["races"], 0)

  def test_targets_registered_before_it_started_are_not_observed(self):
    out = run_json(self, KLUJAX, "before")
    for run in ("unfixed", "fixed"):
      self.assertEqual(out[run]["calls"], 0)
      self.assertIn("solve_with_numeric_f64", out[run]["not_observed"])


class HostCallbackTest(absltest.TestCase):
  def test_callbacks_are_recorded_and_unordered_ones_race(self):

    out = run_json(self, HOST_CALLBACKS)
    none = out["none"]
    for ordering in ("none", "ordered", "entangle"):
      with self.subTest(ordering):
        run = out[ordering]
        # jaxlib registered the callback targets long before: recorded
        # all the same, and not listed as not observed.
        self.assertEqual(run["not_observed"], [])
        self.assertEqual(run["unknown"], 0)
        calls = run["calls"]
        self.assertEqual(len(calls), 9 if ordering == "none" else 6)
        for target, _, platform, thread, start, end, position, place in calls:
          self.assertEqual(target, "xla_ffi_python_cpu_callback")
          self.assertEqual(platform, "Host")
          self.assertGreater(thread, 0)
          self.assertLessEqual(start, end)
          self.assertIsNotNone(position)
          self.assertIn("(host callback)", place)
        functions = [c[1] for c in calls]
        self.assertEqual(functions.count("write"), 3)
        self.assertEqual(functions.count("read"), 3)
        # The write sleeps 5 ms: its record spans it.
        writes = [c for c in calls if c[1] == "write"]
        self.assertTrue(all(c[5] - c[4] >= 5_000_000 for c in writes))
    self.assertEqual([c[1] for c in none["calls"]].count("show"), 3)
    self.assertGreater(none["races"], 0, none["report"])
    self.assertEqual(
      none["objects"], ["Python state (host callbacks may touch anything)"]
    )
    self.assertIn("show", none["functions"])
    self.assertIn("host callback show", none["report"])
    self.assertEqual(out["ordered"]["races"], 0, out["ordered"]["report"])
    self.assertEqual(out["entangle"]["races"], 0, out["entangle"]["report"])

  def test_records_use_the_native_clock(self):
    import time

    from entangle_jax.testing._sanitize import wrapping

    try:
      native = wrapping.native()
    except ImportError:
      self.skipTest("the sanitizer's extension is not built")
    before = time.monotonic_ns()
    now = native.now_ns()
    after = time.monotonic_ns()
    self.assertLessEqual(before, now)
    self.assertLessEqual(now, after)


class ContradictionTest(absltest.TestCase):
  def test_elements_declared_distinct_that_name_one_slot(self):
    out = run_json(self, CONTRADICTION)
    same = sorted(map(tuple, out["same"]))
    # The two writes of slots[0] and slots[1], and the write of both
    # elements at once.
    self.assertIn(("entangle_jax_write_slot", False, 3), same)
    self.assertIn(("entangle_jax_write_slot", True, 3), same)
    self.assertIn("different objects", out["same_report"])
    self.assertEqual(out["different"], [])  # The control.

  def test_arguments_given_as_distinct_that_held_one_slot(self):
    # in_program_order(distinct_arguments=True) leaves calls on two
    # arguments unordered: passing one slot as both breaks the word, which
    # neither the transform nor the static check can see, and this can.
    out = run_json(self, NAMED_APART)
    self.assertNotEmpty(out["same"])
    for declaration, value in out["same"]:
      self.assertEqual(value, 5)
      self.assertIn("'args[0]' and 'args[1]'", declaration)
    self.assertEqual(out["different"], [])  # The control.


def _call(target, start, end, operands, run_id=1, site=None):
  return SanitizedCall(
    target, "Host", "lib", 1, start, end, run_id, site, operands
  )


class ChecksTest(absltest.TestCase):
  """The race rules on hand-made records."""

  def setUp(self):
    super().setUp()
    self.declarations = Declarations(
      (
        TargetDeclaration("w", "write", object=0),
        TargetDeclaration("r", "read", object=0),
      )
    )

  def found(self, *calls):
    return {c: touches(c, self.declarations) for c in calls}

  def test_overlap_on_one_object_with_a_write(self):
    a = _call("w", 0, 10, ((0, (7,)),))
    b = _call("r", 5, 15, ((0, (7,)),))
    (race,) = checks.overlaps(self.found(a, b))
    self.assertEqual((race.kind, race.object.value), ("overlap", 7))
    # Controls: two reads, other objects, one after the other.
    c = _call("r", 5, 15, ((0, (7,)),))
    self.assertEqual(list(checks.overlaps(self.found(b, c))), [])
    d = _call("r", 5, 15, ((0, (8,)),))
    self.assertEqual(list(checks.overlaps(self.found(a, d))), [])
    e = _call("r", 10, 15, ((0, (7,)),))
    self.assertEqual(list(checks.overlaps(self.found(a, e))), [])

  def test_an_undeclared_target_writes_its_small_integer_operands(self):
    a = _call("mystery", 0, 10, ((0, (7,)), (2, (1, 2))))
    b = _call("r", 5, 15, ((0, (2,)),))
    (race,) = checks.overlaps(self.found(a, b))
    self.assertEqual(race.object.value, 2)

  def test_out_of_order_in_one_execution(self):
    module = sites.SanitizedModule("jit_f", 0, "Host")
    first, second = (
      sites.CallSite(k, module, k, "w", in_loop=False, in_branch=False)
      for k in (0, 1)
    )
    a = _call("w", 20, 30, ((0, (7,)),), site=first)
    b = _call("r", 0, 10, ((0, (7,)),), site=second)
    (race,) = checks.out_of_order(self.found(a, b))
    self.assertEqual((race.first, race.second), (a, b))
    # Controls: in program order; in two executions; on other objects.
    c = _call("r", 40, 50, ((0, (7,)),), site=second)
    self.assertEqual(list(checks.out_of_order(self.found(a, c))), [])
    d = _call("r", 0, 10, ((0, (7,)),), run_id=2, site=second)
    self.assertEqual(list(checks.out_of_order(self.found(a, d))), [])
    e = _call("r", 0, 10, ((0, (8,)),), site=second)
    self.assertEqual(list(checks.out_of_order(self.found(a, e))), [])


PLUGIN_SUITE = textwrap.dedent(
  """
  import jax
  import jax.numpy as jnp
  from entangle_jax import entangle
  from entangle_jax.testing import example_store as store

  def hazards(fixed):
    def run(big):
      reads = []
      for slot in range(32):
        token = store.write_slot(slot, 1.0)
        x = store.read_slot(token, delay_us=300)
        if fixed:
          token = entangle(token, x)
        store.write_slot(token, 2.0)
        reads.append(x)
      return jnp.stack(reads), jnp.sum(jnp.sin(big))
    return jax.jit(run)

  # Made once: each test compiles its program once and runs it five times.
  racy, fixed = hazards(False), hazards(True)

  def test_racy():
    for _ in range(5):
      jax.block_until_ready(racy(jnp.ones(1000)))

  def test_fixed():
    for _ in range(5):
      jax.block_until_ready(fixed(jnp.ones(1000)))
  """
)


class PluginTest(absltest.TestCase):
  def run_suite(self, *args):
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    root = folder.name
    with open(f"{root}/test_hazards.py", "w") as f:
      f.write(PLUGIN_SUITE)
    # Temporary files, a race check's kept dump among them, in a folder
    # removed after the test (without TMPDIR the dump goes on /dev/shm).
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    return test_util.pytest_run(root, *args, TMPDIR=tmp.name)

  def test_fails_the_racy_test_and_passes_the_fixed_one(self):
    run = self.run_suite("--entangle-sanitize", "-rA")
    self.assertEqual(run.returncode, 1, run.stdout[-3000:])
    self.assertIn("FAILED test_hazards.py::test_racy", run.stdout)
    self.assertIn("PASSED test_hazards.py::test_fixed", run.stdout)
    self.assertIn("race (out of order) on entangle_jax object", run.stdout)
    # The control: without the option both pass.
    plain = self.run_suite("-rA")
    self.assertEqual(plain.returncode, 0, plain.stdout[-3000:])

  def test_with_the_race_check_and_xdist(self):
    args = ["--entangle-sanitize", "--entangle-races=report", "-rA"]
    if importlib.util.find_spec("xdist") is not None:
      args += ["-n", "2"]
    run = self.run_suite(*args)
    self.assertEqual(run.returncode, 1, run.stdout[-3000:])
    self.assertIn("FAILED test_hazards.py::test_racy", run.stdout)
    self.assertIn("PASSED test_hazards.py::test_fixed", run.stdout)
    self.assertIn("entangle-jax race check", run.stdout)


if __name__ == "__main__":
  absltest.main()
