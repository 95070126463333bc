"""Each reason the one rule gives has its words once
(`entangle_jax._src.reason_words`): a reason that makes two calls conflict
has a cause's code, its headline and its fix; every code is some row's;
and the report, the sanitizer and ``in_program_order``'s warning read
that table (issue 69, "Reasons with their words")."""

import ast
import collections
import pathlib
import tempfile

from absl.testing import absltest

from entangle_jax._src import conflict_rule, reason_words
from entangle_jax._src.conflict_rule import Reason
from entangle_jax._src.targets import declaration
from entangle_jax.testing._findings import causes, from_analysis


def _rows():
  return [*reason_words.BY_REASON.values(), *reason_words.CONTEXT_CAUSES]


class ReasonWordsTest(absltest.TestCase):
  def test_each_reason_has_exactly_one_row(self):
    self.assertEqual(list(reason_words.BY_REASON), list(Reason))
    ids = collections.Counter(map(id, _rows()))
    self.assertEqual(max(ids.values()), 1)

  def test_every_conflicting_reason_maps_to_a_code(self):
    for reason, words in reason_words.BY_REASON.items():
      conflicting = reason in conflict_rule._CONFLICTING
      self.assertEqual(words.code is not None, conflicting, reason)
      if conflicting:
        self.assertIn(words.code, reason_words.BY_CODE)
        self.assertTrue(words.headline)
    # The report ranks every conflicting reason, and no other.
    self.assertEqual(
      set(from_analysis._MOST_TELLING), set(conflict_rule._CONFLICTING)
    )

  def test_every_code_is_a_rows(self):
    used = {words.code for words in _rows() if words.code is not None}
    self.assertEqual(used, set(reason_words.BY_CODE))
    self.assertEqual(
      [kind.code for kind in reason_words.CODES],
      [f"EJ00{k}" for k in range(1, 10)],
    )
    # The findings stage names the same table.
    self.assertIs(causes.CAUSES, reason_words.CODES)
    self.assertIs(causes.BY_CODE, reason_words.BY_CODE)

  def test_the_cross_rank_kinds_are_in_the_table_apart_from_the_causes(self):
    from entangle_jax.testing._findings import rank_findings

    codes = [kind.code for kind in reason_words.RANK_KINDS]
    self.assertEqual(codes, [f"EJ10{k}" for k in range(1, 5)])
    self.assertFalse(set(codes) & set(reason_words.BY_CODE))
    # The findings stage names the same kinds, and says no word of its own.
    self.assertIs(rank_findings.RANK_KINDS, reason_words.RANK_KINDS)
    source = pathlib.Path(rank_findings.__file__).read_text()
    for kind in reason_words.RANK_KINDS:
      self.assertNotIn(kind.fix[:40], source)
      self.assertNotIn(kind.summary[:40], source)

  def test_each_sentence_is_written_once(self):
    said = [w.headline for w in _rows() if w.headline is not None]
    said += [step for w in _rows() for step in w.steps]
    repeated = [s for s, n in collections.Counter(said).items() if n > 1]
    self.assertEqual(repeated, [])

  def test_the_fields_a_row_takes(self):
    names = reason_words.two_names(("solver", None))
    self.assertEqual(names, {"one": "''", "two": "'solver'"})
    self.assertEqual(
      reason_words.TWO_NAMES.headline_with(**names),
      "one object under two names, '' and 'solver': two Resources were "
      "built on one handle",
    )
    words = reason_words.BY_REASON[Reason.ELEMENTS_NOT_DISTINCT]
    (step,) = words.steps_with(names="")
    self.assertTrue(step.endswith("distinct_elements=True))."), step)
    (step,) = words.steps_with(names=reason_words.RESOURCE_NAMES_STEP)
    self.assertIn("its own name", step)


PACKAGE = pathlib.Path(reason_words.__file__).resolve().parents[1]


def _said_in(words: str, paths: list[pathlib.Path]) -> list[pathlib.Path]:
  """Those of `paths` whose code (not a docstring) holds a string with
  `words`: where a sentence with them is composed."""
  found = []
  for path in paths:
    tree = ast.parse(path.read_text())
    # A string standing alone as a statement is a docstring (of a module,
    # class, function or attribute): prose, not a sentence composed.
    docstrings = {
      id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
    }
    if any(
      isinstance(node, ast.Constant)
      and isinstance(node.value, str)
      and words in node.value
      and id(node) not in docstrings
      for node in ast.walk(tree)
    ):
      found.append(path)
  return found


class SafePairWordsTest(absltest.TestCase):
  """Issue 69: the sentence about pairs that declared ``safe_pairs`` left
  out was composed in four places; `reason_words` now writes it."""

  def test_left_out_as_safe_is_written_in_reason_words_only(self):
    home = pathlib.Path(reason_words.__file__).resolve()
    files = sorted(PACKAGE.rglob("*.py"))
    self.assertEqual(_said_in(reason_words.LEFT_OUT, files), [home])

  def test_the_guard_finds_a_sentence_composed_elsewhere(self):
    # Control: a file that composes the words itself is named; one that
    # only mentions them in a docstring is not.
    with tempfile.TemporaryDirectory() as folder:
      composed = pathlib.Path(folder, "composed.py")
      composed.write_text(
        f'def f(n):\n  return f"{{n}} pairs {reason_words.LEFT_OUT}"\n'
      )
      described = pathlib.Path(folder, "described.py")
      described.write_text(f'def f():\n  """{reason_words.LEFT_OUT}."""\n')
      found = _said_in(reason_words.LEFT_OUT, [composed, described])
    self.assertEqual(found, [composed])

  def test_every_report_names_a_safe_pair_alike(self):
    pair = declaration.SafePair("log_*", "counter_get", "own lock", "here")
    quoted = reason_words.safe_pair_named(pair)
    plain = reason_words.safe_pair_named(pair, quote="")
    # The sanitizer's prose quotes no target; the reports quote each.
    self.assertEqual(quoted.replace("`", ""), plain)
    for part in (pair.first, pair.second, pair.reason, pair.source):
      self.assertIn(part, plain)

  def test_left_out_counts_agree_in_number(self):
    for form in ("more", "all", "each"):
      one = reason_words.left_out_count(1, form)
      two = reason_words.left_out_count(2, form)
      self.assertIn(reason_words.LEFT_OUT, one)
      self.assertIn("1 ", one)
      self.assertNotIn("pairs", one)
      self.assertIn("2 ", two)
      self.assertIn("pairs", two)


if __name__ == "__main__":
  absltest.main()
