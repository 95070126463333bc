"""A report whose calls are declared says how `in_program_order` fixes
them; followed literally, the fix leaves no race and every read right.
Where in_program_order would not fix a pair, the report does not suggest
it, and each such claim is shown: the transform leaves that race."""

import re
import unittest.mock
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from jax.experimental import io_callback
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import entangle_jax
from entangle_jax import testing
from entangle_jax._src import native
from entangle_jax._src.targets import in_code
from entangle_jax._src.targets.declaration import TargetDeclaration
from entangle_jax.testing import example_store
from entangle_jax.testing._emitters import github, json_report, sarif
from entangle_jax.testing._findings import from_analysis, platforms, records
from tests.test_util import compiled

UNDECLARED_WRITE = "program_order_fix_test_write"
native.register_handlers(
  example_store._native,
  {"write_slot": UNDECLARED_WRITE, "read_slot": "program_order_fix_test_read"},
  ["cpu"],
)
# The example store under two more names, declared library-wide (no
# object operand), as a binding whose handle is an attribute of a Python
# object, not an operand, is declared.
LIBRARY_WRITE = "program_order_fix_test_library_write"
LIBRARY_READ = "program_order_fix_test_library_read"
native.register_handlers(
  example_store._native,
  {"write_slot": LIBRARY_WRITE, "read_slot": LIBRARY_READ},
  ["cpu"],
)
LIBRARY_WIDE = {
  LIBRARY_WRITE: TargetDeclaration(LIBRARY_WRITE, "write"),
  LIBRARY_READ: TargetDeclaration(LIBRARY_READ, "read"),
}

_SUGGESTED = re.compile(
  r"`(jax\.jit\(entangle_jax\.in_program_order\(.+?\)\))`"
)


def step(big):
  """Twelve hazards, each on its own slot, beside a large array: XLA:CPU
  runs it concurrently, and a second write can overtake its slow read."""
  reads = []
  for i in range(12):
    token = testing.write_slot(i + 40, 1.0)
    reads.append(testing.read_slot(token, delay_us=1000))
    testing.write_slot(token, 2.0)
  return jnp.stack(reads), jnp.sin(big).sum()


def wrong_reads(fn, runs=5) -> list[int]:
  big = jnp.ones(1 << 16)
  return [int(np.sum(np.asarray(fn(big)[0]) != 1.0)) for _ in range(runs)]


def result_of(c) -> records.ModuleResult:
  return from_analysis.module_result(
    "module.txt", "jit_f", platforms.CPU, 36, testing.races(c)
  )


def suggestions(c) -> list[str]:
  """The in_program_order line each emitter suggests first (each group's
  fix, each pair's in JSON, each SARIF result), for compiled `c`."""
  result = result_of(c)
  run = records.Run([result])
  texts = [
    line
    for line in testing.format_races(testing.races(c)).splitlines()
    if line.startswith("  Fix:")
  ]
  for race in json_report.as_json(run)["modules"][0]["races"]:
    texts += [race["in_program_order"] or "", race["fix"]]
  texts += [
    r["message"]["text"] for r in sarif.as_sarif(run)["runs"][0]["results"]
  ]
  found = (_SUGGESTED.search(text) for text in texts)
  return [f.group(1) for f in found if f]


class ReportToFixTest(absltest.TestCase):
  def test_the_suggested_fix_followed_literally(self):
    big = jnp.ones(1 << 16)
    racy = compiled(step, big)
    self.assertLen(testing.races(racy), 12)
    found = suggestions(racy)
    # Text, JSON (its own field and the fix) and GitHub all say it.
    result = result_of(racy)
    line = "`jax.jit(entangle_jax.in_program_order(step))`"
    self.assertIn(line, testing.format_races(testing.races(racy)))
    # No gradient in this module: no word of wrapping one (the control of
    # test_a_gradient_is_wrapped_whole).
    self.assertNotIn("gradient", testing.format_races(testing.races(racy)))
    (json_race, *_) = json_report.as_json(records.Run([result]))["modules"][0][
      "races"
    ]
    self.assertIn(line, json_race["in_program_order"])
    self.assertIn(line, json_race["fix"])
    # An annotation is one line: the cause and its fix's first step only.
    annotation = next(github.annotations(records.Run([result])))
    self.assertNotIn(line, annotation)
    self.assertIn("Fix: the later call", annotation)
    self.assertIn(line, sarif.render(records.Run([result])))
    self.assertEqual(
      set(found), {"jax.jit(entangle_jax.in_program_order(step))"}
    )
    fixed = eval(
      found[0], {"jax": jax, "entangle_jax": entangle_jax, "step": step}
    )
    self.assertEqual(testing.races(fixed.lower(big).compile()), [])
    self.assertEqual(wrong_reads(fixed), [0] * 5)
    if not any(wrong_reads(jax.jit(step))):
      self.skipTest("this XLA happened to run every read first, unordered")

  def test_every_cause_of_a_stale_token(self):
    # Proving order's report: a write on a stale token against a Resource's
    # calls, one of them on a handle that may be the same ("may be one
    # object"). Every group suggests it, and it fixes every pair.
    def stale_step(token):
      res = entangle_jax.Resource(token, name="slots")
      res.write(testing.write_slot, 1.0)
      x = res.read(testing.read_slot)
      y = res.read(lambda t: testing.read_slot(t + 1))
      res.write(testing.write_slot, 2.0)
      testing.write_slot(token, 3.0)  # a stale token, outside the Resource
      return x, y, res.token

    racy = compiled(stale_step, jnp.int32(50))
    groups = from_analysis.findings_of(testing.races(racy)).groups
    self.assertEqual([g.cause.rank for g in groups], [1, 1, 5])
    self.assertNotIn(None, [g.program_order for g in groups])
    (found, *_) = set(suggestions(racy))
    namespace = {"jax": jax, "entangle_jax": entangle_jax}
    fixed = eval(found, {**namespace, "stale_step": stale_step})
    self.assertEqual(testing.races(fixed.lower(jnp.int32(50)).compile()), [])
    self.assertEqual(fixed(jnp.int32(50))[0], 1.0)

  def test_a_gradient_is_wrapped_whole(self):
    @jax.custom_vjp
    def scaled(x):
      return x * 3

    @jax.custom_vjp
    def times(x):
      return x * 2

    scaled.defvjp(
      lambda x: (x * 3, None),
      lambda _, ct: (testing.write_slot(52, ct) * 0 + ct * 3,),
    )
    times.defvjp(
      lambda x: (x * 2, None),
      lambda _, ct: (testing.write_slot(52, ct) * 0 + ct * 2,),
    )

    def loss(x):
      testing.write_slot(52, 1.0)
      return (scaled(x) + times(x)) * testing.read_slot(52)

    racy = compiled(jax.grad(loss), 1.0)
    self.assertNotEmpty(testing.races(racy))
    text = testing.format_races(testing.races(racy))
    whole = "jax.jit(entangle_jax.in_program_order(jax.grad(loss)))"
    if any("transpose(" in r.second.user_scope for r in testing.races(racy)):
      # The scopes say the module came from a gradient (older jax writes
      # no jvp/transpose into them, and the report cannot tell).
      self.assertIn(f"`{whole}`", text)
      self.assertIn("a gradient's module is named for its function too", text)
    fixed = eval(
      whole, {"jax": jax, "entangle_jax": entangle_jax, "loss": loss}
    )
    self.assertEqual(testing.races(fixed.lower(1.0).compile()), [])
    self.assertEqual(fixed(1.0), 5.0)
    # The other way round orders the backward passes too.
    inside = jax.jit(jax.grad(entangle_jax.in_program_order(loss)))
    self.assertEqual(testing.races(inside.lower(1.0).compile()), [])
    self.assertEqual(inside(1.0), 5.0)

  def test_not_suggested_across_devices(self):
    mesh = jax.make_mesh((2,), ("x",))

    def f(slots):
      def body(s):
        token = testing.write_slot(s, jnp.ones(s.shape))
        return testing.read_slot(token)

      return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
        slots
      )

    slots = jax.device_put(
      jnp.arange(44, 46, dtype=jnp.int32), NamedSharding(mesh, P("x"))
    )
    racy = compiled(f, slots)
    across = [r for r in testing.races(racy) if r.across_devices]
    self.assertNotEmpty(across)
    self.assertEqual(suggestions(racy), [])
    # In-program order cannot order two devices' calls: they stay, and it
    # says so.
    with self.assertWarnsRegex(UserWarning, "inside a shard_map"):
      fixed = compiled(entangle_jax.in_program_order(f), slots)
    left = testing.races(fixed)
    self.assertNotEmpty([r for r in left if r.across_devices])

  def test_not_suggested_after_a_call_that_returns_nothing(self):
    def f(slot):
      token = testing.write_slot(slot, 1.0)
      jax.debug.callback(lambda t: None, token)
      return testing.write_slot(token, 2.0)

    racy = compiled(f, jnp.int32(46))
    self.assertNotEmpty(testing.races(racy))
    self.assertEqual(suggestions(racy), [])
    # Nothing can wait for a call with no result: the race stays.
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      fixed = compiled(entangle_jax.in_program_order(f), jnp.int32(46))
    self.assertNotEmpty(testing.races(fixed))

  def test_host_callbacks_are_declared_and_ordered(self):
    def with_callback(slot):
      # A host callback may touch anything (its built-in declaration).
      seen = io_callback(
        lambda t: np.float32(0), jax.ShapeDtypeStruct((), jnp.float32), slot
      )
      testing.write_slot(slot, 2.0)
      return seen

    racy = compiled(with_callback, jnp.int32(47))
    self.assertNotEmpty(testing.races(racy))
    (found, *_) = suggestions(racy)
    namespace = {"jax": jax, "entangle_jax": entangle_jax}
    fixed = eval(found, {**namespace, "with_callback": with_callback})
    self.assertEqual(testing.races(fixed.lower(jnp.int32(47)).compile()), [])

  def test_not_suggested_for_undeclared_calls_or_two_resources(self):
    write = jax.ffi.ffi_call(
      UNDECLARED_WRITE,
      jax.ShapeDtypeStruct((), jnp.int32),
      has_side_effect=True,
    )

    def undeclared(slot):
      token = write(slot, jnp.float32(1.0))
      x = testing.read_slot(token)
      write(token, jnp.float32(2.0))
      return x

    racy = compiled(undeclared, jnp.int32(47))
    self.assertNotEmpty(testing.races(racy))
    self.assertEqual(suggestions(racy), [])  # Declare it first.
    # The fix speaks to what the program uses: no Resource here, so no
    # word of naming one; the declaration's public name.
    text = testing.format_races(testing.races(racy))
    self.assertIn("entangle_jax.declare_target(", text)
    self.assertNotIn("testing.declare_target", text)
    self.assertNotIn("Give each Resource a name", text)

    def two_names(slot):
      # One handle under two names: in_program_order, as the race check,
      # reads them as two objects.
      a = entangle_jax.Resource(slot, name="a")
      b = entangle_jax.Resource(slot, name="b")
      x = a.read(testing.read_slot)
      b.write(testing.write_slot, 2.0)
      return x

    racy = compiled(two_names, jnp.int32(48))
    self.assertNotEmpty(testing.races(racy))
    self.assertEqual(suggestions(racy), [])


def library_step(big):
  """Twelve write-read-write hazards through the library-wide targets."""
  write = jax.ffi.ffi_call(
    LIBRARY_WRITE, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
  )
  read = jax.ffi.ffi_call(LIBRARY_READ, jax.ShapeDtypeStruct((), jnp.float32))
  reads = []
  for i in range(12):
    token = write(jnp.int32(i + 20), jnp.float32(1.0))
    reads.append(read(token, delay_us=np.int64(1000)))
    write(jnp.int32(i + 20), jnp.float32(2.0))
  return jnp.stack(reads), jnp.sin(big).sum()


class LibraryWideTest(absltest.TestCase):
  """A call declared with no object (mode "write" or "read") touches its
  whole library: the report's cause is the one object it shares, with the
  fix that orders the calls, the in_program_order line included, whatever
  the earlier call returns; and following that line fixes the pairs."""

  def test_a_declared_library_wide_target(self):
    big = jnp.ones(1 << 16)
    with unittest.mock.patch.dict(in_code.DECLARED, LIBRARY_WIDE):
      racy = compiled(library_step, big)
      races = testing.races(racy)
      self.assertNotEmpty(races)  # The control.
      causes = {from_analysis.cause_of(r).code for r in races}
      self.assertEqual(causes, {"EJ002"})
      self.assertNotIn("Give each Resource a name", testing.format_races(races))
      found = set(suggestions(racy))
      self.assertEqual(
        found, {"jax.jit(entangle_jax.in_program_order(library_step))"}
      )
      namespace = {"jax": jax, "entangle_jax": entangle_jax}
      fixed = eval(found.pop(), {**namespace, "library_step": library_step})
      self.assertEqual(testing.races(fixed.lower(big).compile()), [])
      self.assertEqual(wrong_reads(fixed), [0] * 5)
      if not any(wrong_reads(jax.jit(library_step))):
        self.skipTest("this XLA happened to run every read first, unordered")

  def test_an_earlier_call_that_returns_a_tuple(self):
    # Host callbacks are declared library-wide writes (one interpreter):
    # a library that keeps its state in Python, whose `put` returns a
    # tuple (the value it replaced and a count), and whose `get` does not
    # take it.
    state = {"value": 0.0, "count": 0}

    def put(v):
      old = np.float32(state["value"])
      state["value"] = float(v)
      state["count"] += 1
      return old, np.int32(state["count"])

    def get(x):
      return np.float32(state["value"] + 0 * x)

    def tuple_step(v, x):
      old, count = io_callback(
        put,
        (
          jax.ShapeDtypeStruct((), jnp.float32),
          jax.ShapeDtypeStruct((), jnp.int32),
        ),
        v,
      )
      seen = io_callback(get, jax.ShapeDtypeStruct((), jnp.float32), x)
      return old, count, seen

    args = (jnp.float32(7.0), jnp.float32(0.0))
    racy = compiled(tuple_step, *args)
    (race,) = testing.races(racy)  # The control.
    self.assertTrue(race.first.instruction.shape.startswith("("))
    self.assertEqual(from_analysis.cause_of(race).code, "EJ002")
    found = set(suggestions(racy))
    self.assertEqual(
      found, {"jax.jit(entangle_jax.in_program_order(tuple_step))"}
    )
    namespace = {"jax": jax, "entangle_jax": entangle_jax}
    fixed = eval(found.pop(), {**namespace, "tuple_step": tuple_step})
    self.assertEqual(testing.races(fixed.lower(*args).compile()), [])
    for k in range(5):
      value = jnp.float32(10.0 + k)
      _, _, seen = fixed(value, jnp.float32(0.0))
      self.assertEqual(float(seen), 10.0 + k)


if __name__ == "__main__":
  absltest.main()
