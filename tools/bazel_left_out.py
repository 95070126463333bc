"""Prints the test files that `bazel test //...` leaves out, one a line,
from the repository's root (``tests/repository/docs_test.py``): the list
`_OUTSIDE_BAZEL` of tests/BUILD.bazel, which says why each is left out.

Usage:
  bazel_left_out.py

CI's locks lane runs these with pytest on the Python and jax that its
Bazel lane runs `bazel test //...` with: the two make that pair's whole
suite (docs/development.md, "CI budget"). A file named there that does
not exist is an error, so that a renamed test cannot fall out of both.
"""

import argparse
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "BUILD.bazel"
LIST_NAME = "_OUTSIDE_BAZEL"


def left_out(text: str, name: str = "BUILD.bazel") -> list[str]:
  """The entries of the `_OUTSIDE_BAZEL` list that the BUILD file `text`
  (called `name` in errors) assigns, as written there (relative to its
  folder). Starlark's assignment of a literal list is Python's syntax, so
  Python's parser reads it."""
  tree = ast.parse(text, filename=name)
  for node in tree.body:
    if (
      isinstance(node, ast.Assign)
      and len(node.targets) == 1
      and isinstance(node.targets[0], ast.Name)
      and node.targets[0].id == LIST_NAME
    ):
      names = ast.literal_eval(node.value)
      if not isinstance(names, list) or not all(
        isinstance(n, str) for n in names
      ):
        raise ValueError(f"{name}: {LIST_NAME} is not a list of strings")
      return names
  raise ValueError(f"{name} assigns no {LIST_NAME} list")


def main(argv: list[str] | None = None, root: pathlib.Path = ROOT) -> int:
  """The command, on the checkout at `root` (another one for tests)."""
  argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
  build = root / BUILD.relative_to(ROOT)
  shown = str(build.relative_to(root))
  try:
    names = left_out(build.read_text(), shown)
  except (OSError, SyntaxError, ValueError) as error:
    print(f"bazel_left_out.py: {error}", file=sys.stderr)
    return 2
  folder = build.parent.relative_to(root)
  files = [str(folder / n) for n in names]
  missing = [f for f in files if not (root / f).is_file()]
  if missing:
    print(
      f"bazel_left_out.py: {shown} names test files that do not exist: "
      + ", ".join(missing),
      file=sys.stderr,
    )
    return 2
  print("\n".join(files))
  return 0


if __name__ == "__main__":
  sys.exit(main())
