"""Prints the shell commands a README section gives, exactly as written.

Usage:
  readme_commands.py SECTION            every `sh` block of SECTION
  readme_commands.py SECTION --block N  only its N-th `sh` block (from 0)
  readme_commands.py SECTION --count    how many `sh` blocks it has

SECTION is a heading's text ("Development"); the section runs to the next
heading of the same or a higher level, so it includes its subsections. Only
fenced blocks whose info string is `sh` count: other fences (Python, Starlark,
program output) are not commands.

CI (.ci/run) pipes the output to `bash -x`, so that what it runs is the
README's text and the two cannot drift. It also checks --count, so that a new
block in the README fails CI until CI runs it in the right place.
"""

import argparse
import dataclasses
import pathlib
import re
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^`\s]*)")


@dataclasses.dataclass(frozen=True)
class Heading:
  line: int  # from 0
  level: int  # the number of #s
  text: str


@dataclasses.dataclass(frozen=True)
class Block:
  line: int  # of the opening fence, from 0
  info: str  # the info string's first word ("sh", "python", "")
  body: str  # the lines between the fences, each ending in a newline


def parse(text: str) -> tuple[list[Heading], list[Block]]:
  """The ATX headings and fenced blocks of a Markdown text, in order.

  A `#` line inside a fenced block is not a heading. A block closes at a
  fence of its own character, at least as long, with no info string
  (CommonMark).

  Raises:
    ValueError: a fenced block is never closed.
  """
  headings, blocks = [], []
  fence, info, start, body = None, "", 0, []
  for i, line in enumerate(text.splitlines()):
    match = _FENCE.match(line)
    if fence is None:
      if match:
        fence, info, start, body = match.group(1), match.group(2), i, []
      elif heading := _HEADING.match(line):
        headings.append(Heading(i, len(heading.group(1)), heading.group(2)))
    elif match and _closes(fence, match):
      blocks.append(Block(start, info, "".join(f"{b}\n" for b in body)))
      fence = None
    else:
      body.append(line)
  if fence is not None:
    raise ValueError(
      f"the {fence} block opened on line {start + 1} never closes"
    )
  return headings, blocks


def _closes(fence: str, match: re.Match[str]) -> bool:
  marker, info = match.group(1), match.group(2)
  return marker[0] == fence[0] and len(marker) >= len(fence) and not info


def shell_blocks(text: str, section: str) -> list[str]:
  """The bodies of the `sh` blocks under the heading `section`, in order.

  The section runs to the next heading of its level or a higher one, so it
  includes its subsections.

  Raises:
    ValueError: no heading, or more than one, is named `section`; or a
      fenced block never closes.
  """
  headings, blocks = parse(text)
  matches = [h for h in headings if h.text == section]
  if len(matches) != 1:
    found = len(matches) or "no"
    raise ValueError(f"{found} headings are named {section!r}")
  (start,) = matches
  ends = [
    h.line for h in headings if h.line > start.line and h.level <= start.level
  ]
  end = ends[0] if ends else float("inf")
  return [
    b.body for b in blocks if start.line < b.line < end and b.info == "sh"
  ]


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("section", help="a heading's text, e.g. Development")
  parser.add_argument("--readme", type=pathlib.Path, default=README)
  choice = parser.add_mutually_exclusive_group()
  choice.add_argument("--block", type=int, help="only this block (from 0)")
  choice.add_argument("--count", action="store_true", help="count blocks")
  args = parser.parse_args(argv)
  try:
    blocks = shell_blocks(args.readme.read_text(), args.section)
  except ValueError as e:
    parser.error(f"{args.readme}: {e}")
  if not blocks:
    parser.error(f"{args.readme}: section {args.section!r} has no sh block")
  if args.count:
    print(len(blocks))
  elif args.block is None:
    sys.stdout.write("".join(blocks))
  elif 0 <= args.block < len(blocks):
    sys.stdout.write(blocks[args.block])
  else:
    parser.error(
      f"section {args.section!r} has {len(blocks)} sh blocks, "
      f"no block {args.block}"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
