"""One conflict rule for the race check and `in_program_order` (issue 51,
item 5): `entangle_jax._src.conflict_rule`, asked by both halves, each
with the evidence it finds in its own terms. Over every combination of
objects, ``Resource`` names, modes, ``distinct_elements`` and safe pairs,
the check's `access.conflict` and the transform's `touches.conflicts`
give one answer, and the rule's answers are the documented ones."""

import itertools

from absl.testing import absltest

from entangle_jax._src import conflict_rule
from entangle_jax._src.conflict_rule import Evidence
from entangle_jax._src.program_order import touches as transform
from entangle_jax._src.targets.declaration import Declarations, SafePair
from entangle_jax.testing._order import access as check
from entangle_jax.testing._order.objects import ObjectRef

# What an operand names, as each half writes it: the check's `ObjectRef`
# (None: not known) and the transform's `Obj` (None: anything).
KINDS = {
  "unknown": (None, None),
  "constant 1": (
    ObjectRef(("constant", 1), scalar=True),
    transform.Obj(consts=frozenset({1})),
  ),
  "constant 2": (
    ObjectRef(("constant", 2), scalar=True),
    transform.Obj(consts=frozenset({2})),
  ),
  "value 1": (ObjectRef(("value", "main", "p1", ())), transform.Obj(key=1)),
  "value 2": (ObjectRef(("value", "main", "p2", ())), transform.Obj(key=2)),
  "value 1[0]": (
    ObjectRef(("value", "main", "p1", ()), element=0),
    transform.Obj(key=1, elements=frozenset({0})),
  ),
  "value 1[1]": (
    ObjectRef(("value", "main", "p1", ()), element=1),
    transform.Obj(key=1, elements=frozenset({1})),
  ),
}
NAMES = (None, "r", "s")
MODES = ("read", "write")


def check_access(kind, name, mode, declared):
  ref, _ = KINDS[kind]
  if ref is not None and ref.element is not None:
    ref = ObjectRef(ref.root, ref.element, distinct_elements=declared)
  return check.Access(name, mode, ref)


def transform_part(kind, name, mode, target):
  _, obj = KINDS[kind]
  if name is not None:  # As a named Resource's call is read.
    obj = transform.Obj(resource=name) if obj is None else obj
    obj = transform.Obj(
      consts=obj.consts, key=obj.key, elements=obj.elements, resource=name
    )
  return transform.Part(mode, obj, target)


class ConflictRuleTest(absltest.TestCase):
  def test_the_rule(self):
    rule = conflict_rule.conflict
    one, apart = Evidence(same=True), Evidence(distinct=True)
    self.assertFalse(rule("read", "read", safe=False, evidence=one))
    self.assertTrue(rule("read", "write", safe=False, evidence=one))
    self.assertFalse(rule("write", "write", safe=True, evidence=one))
    self.assertFalse(rule("write", "write", safe=False, evidence=apart))
    # Names: different ones tell objects apart, but never one object.
    named = Evidence(names=("r", "s"))
    self.assertFalse(rule("write", "write", safe=False, evidence=named))
    same_named = Evidence(same=True, names=("r", "s"))
    self.assertTrue(rule("write", "write", safe=False, evidence=same_named))
    for names in ((None, "s"), ("r", "r"), (None, None)):
      evidence = Evidence(names=names)
      self.assertTrue(rule("write", "read", safe=False, evidence=evidence))
    self.assertTrue(conflict_rule.distinct_constants({1}, {2}))
    self.assertFalse(conflict_rule.distinct_constants({1, 2}, {2}))
    self.assertFalse(conflict_rule.disjoint_elements({0}, {1}, declared=False))
    self.assertTrue(conflict_rule.disjoint_elements({0}, {1}, declared=True))

  def test_the_verdict_says_why(self):
    # Each rule's own reason, first match wins; `conflict` is the
    # verdict's answer alone.
    R = conflict_rule.Reason
    cases = [
      ("read", "read", False, Evidence(same=True), None, R.READS),
      ("write", "write", True, Evidence(same=True), None, R.SAFE_PAIR),
      (
        "write",
        "read",
        False,
        Evidence(same=True, names=("r", "s")),
        None,
        R.SAME_OBJECT,
      ),
      (
        "write",
        "write",
        False,
        Evidence(distinct=True),
        None,
        R.DISTINCT_HANDLES,
      ),
      (
        "write",
        "write",
        False,
        Evidence(distinct=True, elements=True),
        None,
        R.DISTINCT_ELEMENTS,
      ),
      (
        "write",
        "write",
        False,
        Evidence(names=("r", "s")),
        None,
        R.DIFFERENT_NAMES,
      ),
      (
        "write",
        "write",
        False,
        Evidence(names=("r", None)),
        None,
        R.HANDLES_MAY_BE_ONE,
      ),
      # Why they may be one, the most telling first: a call nothing
      # declares that names no object, one that names none, elements
      # nothing declares distinct.
      (
        "write",
        "read",
        False,
        Evidence(anything=(False, True), undeclared=(True, True)),
        None,
        R.UNDECLARED,
      ),
      (
        "write",
        "read",
        False,
        Evidence(anything=(True, False), undeclared=(False, True)),
        None,
        R.NO_OBJECT,
      ),
      (
        "write",
        "write",
        False,
        Evidence(elements=True, undeclared=(True, True)),
        None,
        R.ELEMENTS_NOT_DISTINCT,
      ),
      (
        "write",
        "write",
        False,
        Evidence(same=True),
        ("per-device", None),
        R.PER_DEVICE,
      ),
      (
        "write",
        "write",
        False,
        Evidence(same=True),
        ("shared", None),
        R.SAME_OBJECT,
      ),
    ]
    conflicting = {
      R.SAME_OBJECT,
      R.UNDECLARED,
      R.NO_OBJECT,
      R.ELEMENTS_NOT_DISTINCT,
      R.HANDLES_MAY_BE_ONE,
    }
    for mode_a, mode_b, safe, evidence, devices, reason in cases:
      found = conflict_rule.verdict(
        mode_a,
        mode_b,
        safe=safe,
        evidence=evidence,
        devices=devices,
        accesses=("x", "y"),
      )
      self.assertEqual(found.reason, reason)
      self.assertEqual(found.conflict, reason in conflicting, reason)
      self.assertEqual(
        (found.modes, found.evidence), ((mode_a, mode_b), evidence)
      )
      self.assertEqual(found.accesses, ("x", "y"))
      if devices is None:
        self.assertEqual(
          conflict_rule.conflict(mode_a, mode_b, safe=safe, evidence=evidence),
          found.conflict,
        )
    # The check's verdicts carry its own accesses and what it saw of them.
    a = check_access("value 1[0]", None, "write", False)
    b = check_access("value 1[1]", None, "write", False)
    (found,) = check.verdicts((a,), (b,))
    self.assertEqual(found.accesses, (a, b))
    self.assertTrue(found.conflict and found.evidence.elements)
    (unknown,) = check.verdicts(
      (check_access("unknown", None, "read", False),), (b,)
    )
    self.assertEqual(unknown.evidence.anything, (True, False))

  def test_the_reasons_only_say_why(self):
    # Over every evidence, the verdict conflicts exactly where rules 1 to
    # 3 say so: why two calls may be one object refines the reason and
    # never the answer.
    flags = (False, True)
    pairs = tuple(itertools.product(flags, flags))
    cases = itertools.product(
      MODES,
      MODES,
      flags,
      flags,
      flags,
      itertools.product(NAMES, NAMES),
      pairs,
      flags,
      pairs,
      (None, ("shared", None), ("per-device", "shared")),
    )
    for case in cases:
      mode_a, mode_b, safe, same, distinct, names, anything = case[:7]
      elements, undeclared, devices = case[7:]
      evidence = Evidence(same, distinct, names, anything, elements, undeclared)
      found = conflict_rule.verdict(
        mode_a, mode_b, safe=safe, evidence=evidence, devices=devices
      )
      shared = devices is None or all(
        map(conflict_rule.shared_across_devices, devices)
      )
      expected = (
        conflict_rule.modes_conflict(mode_a, mode_b)
        and shared
        and not safe
        and conflict_rule.may_share(evidence)
      )
      self.assertEqual(found.conflict, expected, case)
      if devices is None:
        self.assertEqual(
          conflict_rule.conflict(mode_a, mode_b, safe=safe, evidence=evidence),
          expected,
          case,
        )

  def test_check_and_transform_agree_everywhere(self):
    answers = {True: 0, False: 0}
    cases = itertools.product(
      KINDS, KINDS, NAMES, NAMES, MODES, MODES, (False, True), (False, True)
    )
    for kind_a, kind_b, name_a, name_b, mode_a, mode_b, declared, safe in cases:
      pairs = (SafePair("a", "b", "a test"),) if safe else ()
      decls = Declarations(safe_pairs=pairs, distinct_elements=declared)
      by_check = check.conflict(
        (check_access(kind_a, name_a, mode_a, declared),),
        (check_access(kind_b, name_b, mode_b, declared),),
        safe=decls.safe("a", "b") is not None,
      )
      by_transform = transform.conflicts(
        (transform_part(kind_a, name_a, mode_a, "a"),),
        (transform_part(kind_b, name_b, mode_b, "b"),),
        decls,
      )
      case = (kind_a, kind_b, name_a, name_b, mode_a, mode_b, declared, safe)
      self.assertEqual(by_check, by_transform, case)
      answers[by_check] += 1
    # Not one answer everywhere: the agreement says something.
    self.assertGreater(answers[True], 1000)
    self.assertGreater(answers[False], 1000)

  def test_what_tells_objects_apart(self):

    def conflicts(kind_a, kind_b, names=(None, None), declared=False):
      d = Declarations(distinct_elements=declared)
      a = transform_part(kind_a, names[0], "write", "a")
      b = transform_part(kind_b, names[1], "write", "b")
      by_transform = transform.conflicts((a,), (b,), d)
      by_check = check.conflict(
        (check_access(kind_a, names[0], "write", declared),),
        (check_access(kind_b, names[1], "write", declared),),
      )
      self.assertEqual(by_check, by_transform)
      return by_check

    self.assertFalse(conflicts("constant 1", "constant 2"))
    self.assertTrue(conflicts("constant 1", "constant 1", ("r", "s")))
    self.assertTrue(conflicts("value 1", "value 2"))
    self.assertFalse(conflicts("value 1", "value 2", ("r", "s")))
    self.assertTrue(conflicts("value 1[0]", "value 1[1]"))
    self.assertFalse(conflicts("value 1[0]", "value 1[1]", declared=True))
    self.assertTrue(conflicts("unknown", "value 1", ("r", None)))


if __name__ == "__main__":
  absltest.main()
