"""``python -m entangle_jax.testing PATH...``: the race check over compiled
modules, as a command.

PATH is an XLA dump directory (``XLA_FLAGS="--xla_dump_to=DIR
--xla_dump_hlo_as_text"``) or a module's text file. Every optimized module
(``*after_optimizations.txt``) is checked with ``races``, the project's
declarations applied (`entangle_jax.testing.declarations_in_effect`), and
the findings are written as text (the default), JSON (``--format json``,
or ``--json``) or GitHub workflow-command annotations (``--format
github``). Exit status, as ruff and mypy use it: 0 when no module races, 1
when one does, 2 when the check cannot answer (no such path, nothing
optimized to read, text it cannot parse), with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from entangle_jax.testing._report import github, race_json, race_text
from entangle_jax.testing._report.findings import Run
from entangle_jax.testing._ways_in.module_files import CannotAnswer, check

FORMATS = ("text", "json", "github")


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    prog="python -m entangle_jax.testing",
    description=(
      "Checks the optimized modules of an XLA dump (or module text files) "
      "for native calls that may conflict and that nothing orders."
    ),
  )
  parser.add_argument("paths", nargs="*", metavar="PATH")
  parser.add_argument(
    "--format",
    choices=FORMATS,
    default=None,
    help="text (the default), json, or github (workflow-command annotations "
    "on the user's lines)",
  )
  parser.add_argument(
    "--json", action="store_true", help="print JSON (--format json)"
  )
  parser.add_argument(
    "--all", action="store_true", help="show every pair, not five per cause"
  )
  args = parser.parse_args(argv)
  if args.json and args.format not in (None, "json"):
    parser.error(f"--json and --format {args.format} ask for two formats")
  args.format = "json" if args.json else args.format or "text"
  return args


def main(
  argv: Sequence[str] | None = None,
  out: TextIO | None = None,
  err: TextIO | None = None,
) -> int:
  """Runs the command; returns its exit status."""
  out = out or sys.stdout
  err = err or sys.stderr
  args = _arguments(argv)
  if not args.paths:
    reason = "give a dump directory or a module file"
    if args.format == "json":
      json.dump({"status": 2, "error": reason}, out)
      print(file=out)
    print(f"error: {reason}", file=err)
    return 2
  try:
    results = check(args.paths, progress=err)
  except CannotAnswer as error:
    if args.format == "json":
      json.dump({"status": 2, "error": str(error)}, out)
      print(file=out)
    print(f"error: {error}", file=err)
    return 2
  run = Run(results)
  status = 1 if run.racing else 0
  if args.format == "json":
    json.dump(race_json.as_json(run, status), out, indent=1)
    print(file=out)
  elif args.format == "github":
    for line in github.annotations(run):
      print(line, file=out)
    print(race_text.summary(run), file=err)
  else:
    shown = None if args.all else race_text.SHOWN_PER_GROUP
    print(race_text.render(run, shown), file=out)
  return status
