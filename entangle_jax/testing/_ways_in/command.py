"""``python -m entangle_jax.testing PATH...``: the race check over compiled
modules, as a command.

PATH is an XLA dump directory (``XLA_FLAGS="--xla_dump_to=DIR
--xla_dump_hlo_as_text"``) or a module's text file. Every optimized module
(``*after_optimizations.txt``) is checked with ``races``, the project's
declarations applied (`entangle_jax.testing.declarations_in_effect`). Exit
status, as ruff and mypy use it: 0 when no module races, 1 when one does,
2 when the check cannot answer (no such path, nothing optimized to read,
text it cannot parse), with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from entangle_jax._src.targets import sources
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._analysis.ops import Op, Race
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._hlo import parser
from entangle_jax.testing._report import race_text

OPTIMIZED = "*after_optimizations.txt"
_PLATFORM = re.compile(r"\.(\w+?)_after_optimizations\.txt$")
_MODULE_NAME = re.compile(r"HloModule\s+([^\s,]+)")
KNOWN_PLATFORMS = ("cpu",)
"""Platforms whose runtime the rules describe (XLA:CPU's)."""
PROGRESS_EVERY = 100


class CannotAnswer(Exception):
  """The check cannot answer; the message says why (exit status 2)."""


@dataclasses.dataclass
class ModuleResult:
  """What the check found in one module."""

  path: str
  module: str
  platform: str | None
  native_calls: int
  races: list[Race]


def optimized_modules(paths: Sequence[str]) -> list[pathlib.Path]:
  """The module files `paths` name: files as given, directories searched
  for optimized modules.

  Raises:
    CannotAnswer: a path does not exist, or none holds an optimized module.
  """
  found: dict[pathlib.Path, pathlib.Path] = {}  # Each file once.
  for given in paths:
    path = pathlib.Path(given)
    if path.is_file():
      found.setdefault(path.resolve(), path)
    elif path.is_dir():
      for module in sorted(path.rglob(OPTIMIZED)):
        found.setdefault(module.resolve(), module)
    else:
      raise CannotAnswer(f"{given}: no such file or directory")
  if not found:
    raise CannotAnswer(
      f"no optimized module ({OPTIMIZED}) under {', '.join(paths)}: dump "
      'with XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text"'
    )
  return list(found.values())


def check_module(
  path: pathlib.Path, declarations: Declarations
) -> ModuleResult:
  """The races of the module in file `path`.

  Raises:
    CannotAnswer: the file cannot be read or parsed (the message names it).
  """
  try:
    text = path.read_text()
  except (OSError, UnicodeDecodeError) as error:
    raise CannotAnswer(f"{path}: cannot read it: {error}") from None
  name = _MODULE_NAME.search(text[:2000])
  platform = _PLATFORM.search(path.name)
  result = ModuleResult(
    str(path),
    name.group(1) if name else path.name,
    platform.group(1) if platform else None,
    0,
    [],
  )
  if "custom-call" not in text:  # No native call: nothing to race.
    try:
      parser.check_header(text)
    except ValueError as error:
      raise CannotAnswer(f"{path}: {error}") from None
    if "\nENTRY " not in text or not text.rstrip().endswith("}"):
      # A file cut short (a dump interrupted, a copy gone wrong) may have
      # lost the calls that race: no answer rather than "no race".
      raise CannotAnswer(
        f"{path}: the module text is cut short (no ENTRY computation, or "
        "its last computation never closes)"
      )
    return result
  try:
    analysis = OrderAnalysis(text, declarations=declarations)
    result.native_calls = len(analysis.user_native_calls())
    if result.native_calls:
      result.races = analysis.races()
  except ValueError as error:
    raise CannotAnswer(f"{path}: {error}") from None
  return result


def check(
  paths: Sequence[str], progress: TextIO | None = None
) -> list[ModuleResult]:
  """Checks every optimized module under `paths`; reports progress on
  `progress` for many modules.

  Raises:
    CannotAnswer: see `optimized_modules` and `check_module`.
  """
  files = optimized_modules(paths)
  declarations = sources.current()
  results = []
  for n, path in enumerate(files, 1):
    results.append(check_module(path, declarations))
    many = progress is not None and len(files) > PROGRESS_EVERY
    if many and (n % PROGRESS_EVERY == 0 or n == len(files)):
      print(f"checked {n}/{len(files)} modules", file=progress)
  return results


def summary(results: Sequence[ModuleResult]) -> str:
  """One line: modules checked, with native calls, with races, pairs."""
  racy = [r for r in results if r.races]
  native = sum(1 for r in results if r.native_calls)
  pairs = sum(len(r.races) for r in results)
  return (
    f"Checked {len(results)} module{'s' * (len(results) != 1)} "
    f"({native} with native calls): {len(racy)} with races, {pairs} "
    f"pair{'s' * (pairs != 1)}."
  )


def platform_note(results: Sequence[ModuleResult]) -> str | None:
  """What the check assumed of modules for platforms other than CPU."""
  others = sorted(
    {
      r.platform
      or "a platform their files do not name (XLA names none for a module "
      "it loaded from JAX's persistent compilation cache)"
      for r in results
      if r.platform not in KNOWN_PLATFORMS
    }
  )
  if not others:
    return None
  count = sum(1 for r in results if r.platform not in KNOWN_PLATFORMS)
  return (
    f"Note: {count} module{'s' * (count != 1)} for {', '.join(others)}: "
    "the rules describe XLA:CPU's runtime (a call starts once its operands "
    "are written); there the check assumes the same, and a module without "
    "races is not proven race-free on that platform."
  )


def module_report(
  result: ModuleResult, shown_per_group: int | None = race_text.SHOWN_PER_GROUP
) -> str:
  """One module's part of a report: its name and file, its grouped pairs."""
  races = race_text.format_races(result.races, shown_per_group=shown_per_group)
  return f"== {result.module} ({result.path})\n{races}"


_SAID_ONCE = ("  Fix: ", "Declarations applied: ")


def said_once(reports: Sequence[str]) -> list[str]:
  """`reports` (of several modules) with each fix and each list of applied
  declarations written out in full the first time only: a suite's modules
  often race for one reason, and the same paragraph fourteen times hides
  the pairs."""
  seen: set[str] = set()
  out = []
  for report in reports:
    lines = []
    for line in report.splitlines():
      start = next((p for p in _SAID_ONCE if line.startswith(p)), None)
      if start is not None and line in seen:
        line = f"{start}as above."
      elif start is not None:
        seen.add(line)
      lines.append(line)
    out.append("\n".join(lines))
  return out


def render(results: Sequence[ModuleResult], shown_per_group: int | None) -> str:
  """The report: each racing module with its grouped pairs, the summary."""
  lines = []
  reports = [module_report(r, shown_per_group) for r in results if r.races]
  for report in said_once(reports):
    lines += [report, ""]
  note = platform_note(results)
  if note:
    lines.append(note)
  lines.append(summary(results))
  return "\n".join(lines)


def _op_json(op: Op) -> dict[str, Any]:
  return {
    "instruction": op.name,
    "target": op.target,
    "access": op.access_text,
    "scope": op.user_scope,
    "location": op.location,
    "binding_location": op.binding_location,
    "backward": op.backward,
  }


def as_json(results: Sequence[ModuleResult], status: int) -> dict[str, Any]:
  """Everything the report says, every pair included."""
  return {
    "status": status,
    "summary": summary(results),
    "platform_note": platform_note(results),
    "modules": [
      {
        "path": r.path,
        "module": r.module,
        "platform": r.platform,
        "native_calls": r.native_calls,
        "races": [
          {
            "first": _op_json(race.first),
            "second": _op_json(race.second),
            "across_devices": race.across_devices,
            "cause": race_text.cause_of(race).headline,
            "fix": race_text.cause_of(race).fix,
          }
          for race in r.races
        ],
      }
      for r in results
    ],
  }


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    prog="python -m entangle_jax.testing",
    description=(
      "Checks the optimized modules of an XLA dump (or module text files) "
      "for native calls that may conflict and that nothing orders."
    ),
  )
  parser.add_argument("paths", nargs="*", metavar="PATH")
  parser.add_argument("--json", action="store_true", help="print JSON")
  parser.add_argument(
    "--all", action="store_true", help="show every pair, not five per cause"
  )
  return parser.parse_args(argv)


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
    if args.json:
      json.dump({"status": 2, "error": reason}, out)
      print(file=out)
    print(f"error: {reason}", file=err)
    return 2
  try:
    results = check(args.paths, progress=err)
  except CannotAnswer as error:
    if args.json:
      json.dump({"status": 2, "error": str(error)}, out)
      print(file=out)
    print(f"error: {error}", file=err)
    return 2
  status = 1 if any(r.races for r in results) else 0
  if args.json:
    json.dump(as_json(results, status), out, indent=1)
    print(file=out)
  else:
    print(
      render(results, None if args.all else race_text.SHOWN_PER_GROUP), file=out
    )
  return status
