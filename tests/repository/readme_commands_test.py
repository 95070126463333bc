"""tools/readme_commands.py finds the README's shell blocks, and only those.

CI runs what this tool prints, so a block it missed would go untested and a
block it invented would fail CI for nothing.
"""

import contextlib
import io
import pathlib
import tempfile

from absl.testing import absltest

from tests import test_util

readme_commands = test_util.development_tool("readme_commands")

ROOT = pathlib.Path(__file__).resolve().parents[2]

DOC = """\
# Title

## Install

```sh
pip install .
```

```python
import not_a_command
```

### From a wheel

````sh
uv build
# a shell comment, not a heading
```
pip install dist/*.whl
````

## Development

```sh
uv sync
```

~~~
plain block, no info string
~~~

## Example

```python
print("code, not a command")
```
"""


class ShellBlocksTest(absltest.TestCase):
  def test_section_includes_subsections_and_only_sh_blocks(self):
    self.assertEqual(
      readme_commands.shell_blocks(DOC, "Install"),
      [
        "pip install .\n",
        "uv build\n# a shell comment, not a heading\n```\n"
        "pip install dist/*.whl\n",
      ],
    )

  def test_section_ends_at_next_heading_of_its_level(self):
    self.assertEqual(
      readme_commands.shell_blocks(DOC, "Development"), ["uv sync\n"]
    )

  def test_subsection_alone(self):
    (block,) = readme_commands.shell_blocks(DOC, "From a wheel")
    self.assertTrue(block.startswith("uv build\n"))

  def test_hash_line_inside_a_block_is_not_a_heading(self):
    headings, _ = readme_commands.parse(DOC)
    self.assertNotIn(
      "a shell comment, not a heading", [h.text for h in headings]
    )

  def test_missing_heading_is_named(self):
    with self.assertRaisesRegex(ValueError, "no headings are named 'Usage'"):
      readme_commands.shell_blocks(DOC, "Usage")

  def test_duplicate_heading_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "2 headings are named"):
      readme_commands.shell_blocks(DOC + "\n## Install\n", "Install")

  def test_unclosed_fence_names_its_line(self):
    with self.assertRaisesRegex(ValueError, "line 3 never closes"):
      readme_commands.parse("# T\n\n```sh\nuv sync\n")


class MainTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    # absltest's create_tempfile needs absl's flags parsed, which pytest
    # does not do.
    folder = self.enterContext(tempfile.TemporaryDirectory())
    self.readme = str(pathlib.Path(folder, "README.md"))
    pathlib.Path(self.readme).write_text(DOC)

  def run_main(self, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      code = readme_commands.main([*args, "--readme", self.readme])
    self.assertEqual(code, 0)
    return out.getvalue()

  def test_count_and_block(self):
    self.assertEqual(self.run_main("Install", "--count"), "2\n")
    self.assertEqual(
      self.run_main("Install", "--block", "0"), "pip install .\n"
    )

  def test_block_out_of_range_fails(self):
    with (
      contextlib.redirect_stderr(io.StringIO()) as err,
      self.assertRaises(SystemExit),
    ):
      self.run_main("Install", "--block", "2")
    self.assertIn("has 2 sh blocks, no block 2", err.getvalue())

  def test_section_without_sh_block_fails(self):
    with (
      contextlib.redirect_stderr(io.StringIO()) as err,
      self.assertRaises(SystemExit),
    ):
      self.run_main("Example")
    self.assertIn("has no sh block", err.getvalue())


class ProjectReadmeTest(absltest.TestCase):
  # .ci/run runs these sections' blocks; each must hold commands.
  def test_ci_sections_have_commands(self):
    text = (ROOT / "README.md").read_text()
    for section in ("Development", "Documentation", "Install"):
      blocks = readme_commands.shell_blocks(text, section)
      self.assertNotEmpty(blocks, section)
      for block in blocks:
        self.assertTrue(block.strip(), section)

  def test_documentation_blocks_build_then_serve(self):
    # .ci/run runs block 0 and waits for it, then runs block 1 in the
    # background and opens the pages it serves on 127.0.0.1:8000.
    text = (ROOT / "README.md").read_text()
    build, serve = readme_commands.shell_blocks(text, "Documentation")
    self.assertIn("sphinx-build -W", build)
    self.assertIn("http.server 8000 --bind 127.0.0.1", serve)


if __name__ == "__main__":
  absltest.main()
