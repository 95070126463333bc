"""Every code block of README.md and docs/*.md runs; shown output is printed.

tools/doc_blocks.py says what each kind of block means. One test per page;
pages are independent (each has its own namespace and working folder).
pytest runs this file; Bazel leaves it out (tests/BUILD.bazel says why).
"""

import importlib.util
import pathlib
import re
import tempfile
import tomllib
import unittest

from absl.testing import absltest, parameterized

from tests import test_util

doc_blocks = test_util.development_tool("doc_blocks")

ROOT = pathlib.Path(__file__).resolve().parents[2]
if not (ROOT / "docs").is_dir():
  raise unittest.SkipTest(f"no docs/ beside {ROOT / 'tests'}: not a checkout")

PAGES = doc_blocks.pages(ROOT)


class PagesTest(parameterized.TestCase):
  @parameterized.named_parameters(
    (str(page.relative_to(ROOT)).replace("/", "_").replace(".", "_"), page)
    for page in PAGES
  )
  def test_blocks_run_and_print_what_is_shown(self, page):
    run = doc_blocks.PageRun(page, ROOT).run()
    self.assertEqual(
      [],
      [
        f"{run.name}:{m.line}: the page shows\n{m.shown}but the code "
        f"printed\n{m.printed}"
        for m in run.mismatches
      ],
      "`uv run python tools/doc_blocks.py --update` rewrites output blocks",
    )

  def test_every_page_of_the_site_is_checked(self):
    names = {p.name for p in PAGES}
    self.assertContainsSubset(
      {"README.md", "index.md", "getting_started.md", "seeing_order.md"},
      names,
    )


def heading_anchors(page: pathlib.Path) -> set[str]:
  """The anchors GitHub and MyST give the page's headings (``#what-...``)."""
  headings = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
  return {
    re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
    for h in headings
  }


class ReadmeTest(absltest.TestCase):
  """The README stays the short front page, and its links lead somewhere."""

  readme = ROOT / "README.md"

  def test_at_most_200_lines(self):
    lines = self.readme.read_text().splitlines()
    self.assertLessEqual(len(lines), 200, "move the detail into docs/")

  def test_links_are_absolute_and_name_existing_pages_and_headings(self):
    # The README is the package index page's text (pyproject's `readme`),
    # where a relative link leads nowhere: every link is absolute, and one
    # into the repository (its [project.urls] Source, blob/main/) names a
    # file that exists here, and a heading of it.
    text = self.readme.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    self.assertNotEmpty(links)
    relative = [link for link in links if "://" not in link]
    self.assertEqual([], relative)
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
      "urls"
    ]["Source"]
    into_repository = f"{source}/blob/main/"
    broken = []
    checked = 0
    for link in links:
      if not link.startswith(into_repository):
        continue
      path, _, anchor = link.removeprefix(into_repository).partition("#")
      target = ROOT / path
      checked += 1
      if not target.exists():
        broken.append(path)
      elif anchor and anchor not in heading_anchors(target):
        broken.append(f"{path}#{anchor}")
    self.assertGreater(checked, 0)
    self.assertEqual([], broken)
    # Any other link to the project's host is the repository itself.
    host = source.rsplit("/", 2)[0]
    others = [
      link
      for link in links
      if link.startswith(host) and not link.startswith(into_repository)
    ]
    for link in others:
      self.assertEqual(link, source)

  def test_project_urls_point_into_the_source_repository(self):
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
      "urls"
    ]
    self.assertEqual(
      set(urls), {"Documentation", "Source", "Changelog", "Issues"}
    )
    source = urls["Source"]
    self.assertEqual(urls["Issues"], f"{source}/issues")
    for name, path in (
      ("Documentation", "docs/index.md"),
      ("Changelog", "CHANGELOG.md"),
    ):
      self.assertEqual(urls[name], f"{source}/blob/main/{path}")
      self.assertTrue((ROOT / path).is_file(), path)

  def test_a_missing_heading_is_caught(self):
    anchors = heading_anchors(ROOT / "docs" / "proving_order.md")
    self.assertIn("what-races-reports", anchors)
    self.assertNotIn("what-races-report", anchors)


class RunnerTest(absltest.TestCase):
  """The runner itself: it must be able to fail."""

  def run_page(self, text: str):
    folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    (folder / "docs").mkdir()
    page = folder / "docs" / "page.md"
    page.write_text(text)
    return doc_blocks.PageRun(page, folder).run()

  def test_wrong_output_is_reported(self):
    run = self.run_page(
      "```python\nprint(6 * 7)\n```\n\n```text output\n43\n```\n"
    )
    (mismatch,) = run.mismatches
    self.assertEqual((mismatch.shown, mismatch.printed), ("43\n", "42\n"))

  def test_right_output_passes(self):
    run = self.run_page(
      "```python\nprint(6 * 7)\n```\n\n```text output\n42\n```\n"
    )
    self.assertEqual(run.mismatches, [])

  def test_shell_output_is_compared(self):
    run = self.run_page(
      "```sh\npython -c 'print(1 + 1)'\n```\n\n```text output\n3\n```\n"
    )
    self.assertLen(run.mismatches, 1)

  def test_output_of_another_jax_is_not_compared(self):
    run = self.run_page(
      "```python\nprint(1)\n```\n\n<!-- output with jax 0.0.1: old -->\n"
      "```text output\n2\n```\n"
    )
    self.assertEqual(run.mismatches, [])
    self.assertLen(run.unchecked, 1)

  def test_failing_block_fails(self):
    with self.assertRaises(ZeroDivisionError):
      self.run_page("```python\n1 / 0\n```\n")
    with self.assertRaisesRegex(AssertionError, "exit status 3"):
      self.run_page("```sh\nexit 3\n```\n")

  def test_source_lines_are_the_pages(self):
    try:
      self.run_page("# Title\n\n```python\nx = 1\n1 / 0\n```\n")
    except ZeroDivisionError as e:
      frame = e.__traceback__
    else:
      self.fail("the block's ZeroDivisionError did not propagate")
    assert frame is not None
    while frame.tb_next is not None:
      frame = frame.tb_next
    self.assertEqual(
      (frame.tb_frame.f_code.co_filename, frame.tb_lineno),
      ("docs/page.md", 5),
    )

  def test_ellipsis_line_stands_for_any_lines(self):
    match = doc_blocks.output_matches
    self.assertTrue(match("a\n...\nd\n", "a\nb\nc\nd\n"))
    self.assertTrue(match("a\n...\nd\n", "a\nd\n"))
    self.assertFalse(match("a\n...\nd\n", "a\nb\nc\n"))
    self.assertFalse(match("a ... d\n", "a b d\n"))

  def test_unmarked_block_is_refused(self):
    with self.assertRaisesRegex(ValueError, r"page.md:1: a 'starlark' block"):
      doc_blocks.parse("```starlark\nx = 1\n```\n", "page.md")
    with self.assertRaisesRegex(ValueError, "write the reason"):
      doc_blocks.parse("<!-- not run -->\n```starlark\nx\n```\n", "page.md")
    with self.assertRaisesRegex(ValueError, "neither run nor marked"):
      doc_blocks.parse("```{code-block} python\nx\n```\n", "page.md")

  def test_marked_generated_and_directive_blocks_are_not_run(self):
    blocks = doc_blocks.parse(
      "<!-- not run: needs a GPU -->\n```python\n1 / 0\n```\n"
      "<!-- begin: tool -->\n```mermaid\nx\n```\n<!-- end: tool -->\n"
      "<!-- bench-results:begin -->\n```\nx\n```\n<!-- bench-results:end -->\n"
      "```{toctree}\npage\n```\n",
      "page.md",
    )
    self.assertEqual(
      [(b.kind, b.why) for b in blocks],
      [(doc_blocks.SHOWN, "needs a GPU"), (doc_blocks.DIRECTIVE, "")],
    )

  def test_an_excerpt_must_be_lines_of_its_file(self):
    folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    (folder / "docs").mkdir()
    (folder / "lib.cc").write_text("int a;\nint b;\nint c;\n")
    page = folder / "docs" / "page.md"
    quote = "<!-- from: lib.cc -->\n```cpp\n{}```\n"
    page.write_text(quote.format("int b;\nint c;\n"))
    doc_blocks.PageRun(page, folder).run()  # The file's lines: passes.
    for drifted in ("int c;\nint b;\n", "nt b;\n", "int d;\n"):
      page.write_text(quote.format(drifted))
      with self.assertRaisesRegex(AssertionError, "not lines of lib.cc"):
        doc_blocks.PageRun(page, folder).run()
    page.write_text(quote.replace("lib.cc", "gone.cc").format("int a;\n"))
    with self.assertRaisesRegex(AssertionError, "gone.cc, which does not"):
      doc_blocks.PageRun(page, folder).run()

  def test_a_fresh_interpreter_block_runs_alone(self):
    """It sees nothing of the page's earlier blocks (the control: the next
    plain block does), and an error in it names the page's line."""
    folder = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
    page = folder / "page.md"
    fresh = "<!-- run: in a fresh interpreter: it must start first -->\n"
    page.write_text(
      "```python\nimport sys\nsys.modules['seen_by_the_page'] = sys\n```\n"
      + fresh
      + "```python\nimport sys\nprint('seen_by_the_page' in sys.modules)\n```\n"
      "```python\nprint('seen_by_the_page' in sys.modules)\n```\n"
      "```text output\nFalse\nTrue\n```\n"
    )
    blocks = doc_blocks.parse(page.read_text(), "page.md")
    self.assertEqual(blocks[1].kind, doc_blocks.FRESH)
    self.assertEqual(blocks[1].why, "it must start first")
    self.assertEqual(doc_blocks.PageRun(page, folder).run().mismatches, [])
    page.write_text(fresh + "```python\n\nraise KeyError('x')\n```\n")
    with self.assertRaisesRegex(
      AssertionError, r'(?s)page.md:2: exit.*"page.md", line 4'
    ):
      doc_blocks.PageRun(page, folder).run()
    with self.assertRaisesRegex(ValueError, "only a Python block"):
      doc_blocks.parse(fresh + "```sh\ntrue\n```\n", "page.md")

  def test_unclosed_block_names_its_line(self):
    with self.assertRaisesRegex(ValueError, "page.md:3: the block never"):
      doc_blocks.parse("# T\n\n```python\nx = 1\n", "page.md")


def load_bench_chart():
  path = ROOT / "docs" / "_ext" / "bench_chart.py"
  spec = importlib.util.spec_from_file_location("bench_chart", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


class BenchChartTest(absltest.TestCase):
  """The performance page's chart reads the benchmark's cost table."""

  def test_reads_medians_ranges_and_baselines(self):
    page = (
      "<!-- bench-results:begin -->\nrun facts\n\n"
      "| implementation | a, ns | b, x identity |\n|---|---|---|\n"
      "| ours | 88 (87…89) | 1.05x (1.04…1.28x) |\n"
      "| identity | 0 (baseline) | 1x (baseline) |\n\n"
      "| metric | other table |\n|---|---|\n| x | y |\n"
    )
    metrics, table = load_bench_chart().cost_table(page)
    self.assertEqual(metrics, ["a, ns", "b, x identity"])
    self.assertEqual(
      table,
      {
        "ours": [(88.0, 87.0, 89.0), (1.05, 1.04, 1.28)],
        "identity": [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0)],
      },
    )

  def test_a_cell_that_is_no_median_is_refused(self):
    page = (
      "<!-- bench-results:begin -->\n| implementation | a |\n|---|---|\n"
      "| ours | fast |\n"
    )
    with self.assertRaisesRegex(ValueError, "'fast' is not a median"):
      load_bench_chart().cost_table(page)

  def test_the_performance_page_has_a_full_table(self):
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    metrics, table = load_bench_chart().cost_table(page)
    self.assertIn("entangle-jax", table)
    for name, values in table.items():
      self.assertLen(values, len(metrics), name)


if __name__ == "__main__":
  absltest.main()
