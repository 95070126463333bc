"""A host callback's race in the sanitizer's JSON and SARIF forms carries
the static check's line and fix, as in the text (issue 78, defect 2):
the test reads each form, applies the fix it gives to the program, and
sees the race gone.

* A native read that nothing orders after an ``io_callback`` that clears
  the example store; two ``io_callback``s, the first setting Python state,
  the second reading it, unordered (the first's operand is slow to
  compute).
* Each form's fix names the later call and the operand of it that must
  consume the earlier call's result through ``entangle``; the form names
  the later call's file and line. The test checks that line is the later
  call of the program, and runs the program again with that operand
  entangled with the earlier call's result there.
* The control: before the fix each shape read wrong values (the read ran
  before the callback the program made first) and each form reports each
  race; after it, every read is right and no form reports a race.

The program runs from a file (so that the forms name a real file and
line) in a fresh interpreter, where the example store registers after the
sanitizer started.
"""

import json
import os
import re
import tempfile
import textwrap

from absl.testing import absltest

from tests import preloaded_child, test_util

RUNS = 6

PROGRAM = textwrap.dedent(
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
  # Per shape, the operand of its later call that the fix entangles with
  # the earlier call's result ("-": none, the program as written).
  FIX = json.loads(sys.argv[2])
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

  def fixed(name, operands, earlier):
    k = FIX[name]
    if k != "-":
      operands[k] = entangle(operands[k], earlier)
    return operands

  def native(s, big):
    t = store.write_slot(s, 1.0)
    r = io_callback(store.clear_in_callback, SLOT, t + slow_zero(big))
    ops = fixed("native", [t], r)
    return store.read_slot(*ops)  # LATER native

  def host(s, big):
    r = io_callback(set_one, SLOT, s + slow_zero(big))
    ops = fixed("host", [s], r)
    return io_callback(get, F32, *ops)  # LATER host

  # Program order: the read after the callback made first.
  SHAPES = {"native": (native, 0.0), "host": (host, 1.0)}

  out = {}
  big = jnp.ones(1 << 20, jnp.float32)
  for name, (f, right) in SHAPES.items():
    with testing.sanitize() as seen:
      g = jax.jit(f)
      reads = []
      for _ in range(RUNS):
        state["v"] = 0.0
        reads.append(float(jax.device_get(g(jnp.int32(3), big))))
    out[name] = {
      "wrong": sum(r != right for r in reads),
      "races": len(seen.races),
      "json": json.loads(seen.report(file=sys.stderr, format="json")),
      "sarif": json.loads(seen.report(file=sys.stderr, format="sarif")),
    }
  print(json.dumps(out))
  """
)

# The fix's words (`reason_words`' fix for a pair the program orders one
# way): the later call, and the operand of it to entangle, a native
# call's by number;
# for a callback, "an operand", any array it takes (these take one).
_LATER = re.compile(r"the later call \(`([^`]+)`\)")
_OPERAND = re.compile(
  r"make (?:the later call's operand (\d+)|an operand of the later call) "
  r"consume a value computed from the earlier call's result "
  r"\(`(\w+) = entangle\(\2, r\)`"
)


def _operand(fix):
  """The operand of the later call that `fix` entangles, or None."""
  found = _OPERAND.search(fix or "")
  if found is None:
    return None
  return int(found.group(1)) if found.group(1) is not None else 0


def _fix_of_json(race):
  """(fix text, the later call's target, file, line) from a JSON race."""
  later = race["second"]  # "out of order": the program made `first` first.
  return race["static"]["fix"], later["target"], later["path"], later["line"]


def _fix_of_sarif(result):
  """(fix text, the later call's target, file, line) from a SARIF result:
  its location is the later call's."""
  where = result["locations"][0]["physicalLocation"]
  uri = where["artifactLocation"]["uri"]
  assert uri.startswith("file://"), uri
  fix = result["properties"]["fix"]
  later = _LATER.search(fix or "")
  return (
    fix,
    later.group(1) if later else None,
    uri[len("file://") :],
    where["region"]["startLine"],
  )


class CallbackFormatsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = tempfile.mkdtemp()
    cls.path = os.path.join(cls.dir, "callback_program.py")
    with open(cls.path, "w") as f:
      f.write(PROGRAM)
    cls.lines = PROGRAM.splitlines()
    cls.racy = cls.run_program({"native": "-", "host": "-"})
    # Each form's fix, applied: the operand it names at the line it names.
    cls.fixes = {}
    for name, shape in cls.racy.items():
      for form, entries in (
        ("json", [_fix_of_json(r) for r in shape["json"]["races"]]),
        (
          "sarif",
          [_fix_of_sarif(r) for r in shape["sarif"]["runs"][0]["results"]],
        ),
      ):
        cls.fixes[name, form] = entries
    applied = {}
    for name in cls.racy:
      operands = {
        _operand(fix)
        for form in ("json", "sarif")
        for fix, *_ in cls.fixes[name, form]
      }
      found = operands.pop() if len(operands) == 1 else None
      applied[name] = "-" if found is None else found
    cls.applied = applied
    cls.fixed = cls.run_program(applied)

  @classmethod
  def run_program(cls, fix):
    run = preloaded_child.run(
      [cls.path, str(RUNS), json.dumps(fix)],
      timeout=300,
      env=test_util.child_env(),
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])

  def assert_fix_given(self, name, form):
    shape = self.racy[name]
    # The control: the race happened (reads went wrong), and each race is
    # in the form.
    self.assertGreater(shape["wrong"], 0, shape)
    entries = self.fixes[name, form]
    self.assertLen(entries, shape["races"])
    self.assertGreaterEqual(shape["races"], shape["wrong"])
    for fix, target, path, line in entries:
      self.assertIsNotNone(fix, (name, form))
      later = _LATER.search(fix)
      assert later is not None, fix
      self.assertEqual(later.group(1), target, fix)
      self.assertIsNotNone(_operand(fix), fix)
      # The form names the program's later call, where the fix goes.
      self.assertEqual(os.path.realpath(path), os.path.realpath(self.path))
      self.assertIn(f"# LATER {name}", self.lines[line - 1], (form, line))

  def test_json_gives_the_static_line_and_fix(self):
    for name in ("native", "host"):
      self.assert_fix_given(name, "json")
      for race in self.racy[name]["json"]["races"]:
        self.assertEqual(
          race["static"]["finding"],
          "the static check reports them as may race, and they did",
        )
        self.assertRegex(race["static"]["code"], r"^EJ\d{3}$")
        self.assertTrue(race["first"]["function"])  # The callback.

  def test_sarif_gives_the_static_line_and_fix(self):
    for name in ("native", "host"):
      self.assert_fix_given(name, "sarif")
      for result in self.racy[name]["sarif"]["runs"][0]["results"]:
        props = result["properties"]
        self.assertEqual(result["ruleId"], "sanitizer/out-of-order")
        self.assertEqual(
          props["finding"],
          "the static check reports them as may race, and they did",
        )
        self.assertIn(props["fix"], result["message"]["text"])
        self.assertTrue(result["relatedLocations"])

  def test_the_fix_each_form_gives_leaves_no_race(self):
    for name in ("native", "host"):
      self.assertNotEqual(self.applied[name], "-", name)
      shape = self.fixed[name]
      # Every read ran after the callback the program made first.
      self.assertEqual(shape["wrong"], 0, shape)
      self.assertEqual(shape["races"], 0, shape)
      self.assertEqual(shape["json"]["races"], [], shape)
      self.assertEqual(shape["sarif"]["runs"][0]["results"], [], shape)

  def test_an_unknown_format_is_named(self):
    from entangle_jax.testing._sanitize.session import Seen

    with self.assertRaisesRegex(ValueError, "'xml'"):
      Seen().report(format="xml")


if __name__ == "__main__":
  absltest.main()
