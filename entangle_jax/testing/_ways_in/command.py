"""``python -m entangle_jax.testing PATH...``: the race check over
compiled modules, as a command.

PATH is an XLA dump directory (``XLA_FLAGS="--xla_dump_to=DIR
--xla_dump_hlo_as_text"``) or a module's text file. Every optimized module
(``*after_optimizations.txt``) is checked with ``races``, the project's
declarations applied (`entangle_jax.testing.declarations_in_effect`: the
``[tool.entangle-jax]`` table of the nearest ``pyproject.toml`` from the
working directory, or of the one ``--project PATH`` names; the answer says
which it read, or that it found none), and the findings are written in the
format ``--format`` names (the table of formats,
`entangle_jax.testing._emitters.formats`): text (the default), JSON
(``json``, or ``--json``), GitHub workflow-command annotations
(``github``) or SARIF 2.1.0 for GitHub code scanning (``sarif``). Every
format but text goes to stdout alone, the summary line and where the
declarations came from to stderr. Exit status, as ruff and mypy use it: 0
when no module races, 1 when one does, 2 when the check cannot answer (no
such path, nothing optimized to read), with the reason, or could not
answer for a module (a file it cannot read, text it cannot parse): then
every other module is still checked and reported, the module is named with
its reason, and the status is 2 whatever the others found.

``--processes N`` (or ``--processes P0,P1,...``) says which process runs
each device of a multi-process program's modules (``jax.distributed``):
N processes over which each module's devices are split evenly, in device
order, or one process index per device. Where each device is in a
process of its own, copies of a call on two devices share no
process-wide state: those pairs are left out, counted with the reason
(`device_processes`). A value that is neither is an error (status 2,
naming the flag); a map that does not fit a module's devices leaves that
module unchecked, with the reason.

``--ranks DIR0 DIR1 ...`` checks a multi-process program instead: one
dump directory (or module file) per rank, in rank order. Each rank's
optimized modules that communicate (XLA's collectives, targets declared
to communicate) are paired in dump order, and each pair is checked with
`entangle_jax.testing.races_across`; ranks that compiled different
numbers of such modules, or modules of different names, are a mismatch.
Exit 0 when every module is proved, 1 on a mismatch, a deadlock or a
collective under rank-dependent control, 2 when it cannot answer. Every
``--format`` applies (`entangle_jax.testing._emitters.formats`):
each problem is a finding with a stable code (``EJ101`` rank-dependent
control, ``EJ102`` possible deadlock, ``EJ103`` mismatch, ``EJ104``
deadlock), every rank's call with its ``file:line``, and the fix.

``--sanitized-ranks DIR`` compares what the sanitizer recorded at run time
instead (``sanitize(ranks=DIR)``: each rank's communicating calls in
``DIR/rankR``): the first call at which the ranks differ, on each rank,
and the watchdog's reports of ranks that hung
(`entangle_jax.testing.merge_sanitized_ranks`). Text (or ``--format
json``); exit 0 when they agree and none hung, 1 when they differ or one
hung, 2 when a rank's record is missing or of another launch, or there is
none.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import TextIO

from entangle_jax._src.targets import sources, table
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._analysis import device_processes, rank_sequences
from entangle_jax.testing._analysis.across_ranks import check_programs
from entangle_jax.testing._analysis.ranks import BeyondTheModel, RankProgram
from entangle_jax.testing._emitters import formats, sentences
from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._findings import from_ranks
from entangle_jax.testing._findings.rank_findings import RankRun
from entangle_jax.testing._findings.records import DeclarationsRead, Run
from entangle_jax.testing._hlo import dumped_module
from entangle_jax.testing._ways_in.module_files import (
  CannotAnswer,
  check,
  optimized_modules,
)

FORMATS = formats.NAMES


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
    prog="python -m entangle_jax.testing",
    description=(
      "Checks the optimized modules of an XLA dump (or module text files) "
      "for native calls that may conflict and that nothing orders."
    ),
  )
  parser.add_argument(
    "paths",
    nargs="*",
    metavar="PATH",
    help='an XLA dump folder (XLA_FLAGS="--xla_dump_to=DIR '
    '--xla_dump_hlo_as_text"), whose *after_optimizations.txt modules are '
    "checked, or one module's HLO text file",
  )
  parser.add_argument(
    "--format",
    choices=FORMATS,
    default=None,
    help="; ".join(f"{f.name}: {f.help}" for f in formats.FORMATS.values())
    + " (text by default)",
  )
  parser.add_argument(
    "--json", action="store_true", help="print JSON (--format json)"
  )
  parser.add_argument(
    "--all", action="store_true", help="show every pair, not five per cause"
  )
  parser.add_argument(
    "--project",
    metavar="PATH",
    help="read the declarations of this pyproject.toml (or of the one in "
    "this directory) rather than of the nearest one from the working "
    "directory",
  )
  parser.add_argument(
    "--processes",
    metavar="N|P0,P1,...",
    help="which process runs each device of the dumped modules (a "
    "multi-process program, jax.distributed): a number of processes, over "
    "which each module's devices are split evenly in device order, or one "
    "process index per device; calls on two devices of different "
    "processes share no process-wide state, and are not reported as "
    "racing there",
  )
  parser.add_argument(
    "--ranks",
    nargs="+",
    metavar="DIR",
    help="check a multi-process program across ranks: one dump directory "
    "(or module file) per rank, in rank order",
  )
  parser.add_argument(
    "--sanitized-ranks",
    metavar="DIR",
    help="compare the communicating calls each rank recorded at run time "
    "(sanitize(ranks=DIR)): the first call at which they differ, and the "
    "watchdog's reports of ranks that hung",
  )
  args = parser.parse_args(argv)
  if args.sanitized_ranks is not None:
    if args.paths or args.ranks:
      parser.error("--sanitized-ranks DIR takes no PATHs and no --ranks")
    if args.format not in (None, "text", "json"):
      parser.error(f"--sanitized-ranks writes text or json, not {args.format}")
  if args.ranks and args.paths:
    parser.error("give either PATHs or --ranks DIR..., not both")
  if args.ranks is not None:
    if len(args.ranks) < 2:
      parser.error("--ranks takes one dump per rank: two or more")
    seen = [os.path.realpath(r) for r in args.ranks]
    twice = sorted(
      {r for r in args.ranks if seen.count(os.path.realpath(r)) > 1}
    )
    if twice:
      parser.error(f"--ranks names {', '.join(twice)} for two ranks")
  if args.processes is not None:
    if args.ranks:
      parser.error("--processes applies to PATHs, not to --ranks")
    try:
      args.processes = device_processes.parse(args.processes)
    except ValueError as error:
      parser.error(str(error))
  if args.json and args.format not in (None, "json"):
    parser.error(f"--json and --format {args.format} ask for two formats")
  args.format = "json" if args.json else args.format or "text"
  return args


def _cannot_answer(
  error: CannotAnswer, fmt: str, out: TextIO, err: TextIO
) -> int:
  """Says why the check could not answer (as JSON too, for ``--format
  json``, so that a tool reading the output gets a document); exit 2."""
  if fmt == "json":
    json.dump({"status": 2, "error": str(error)}, out)
    print(file=out)
  print(f"error: {error}", file=err)
  return 2


def _declarations(project: str | None) -> tuple[Declarations, str, str | None]:
  """The declarations to apply, the sentence that says where they came
  from, and the pyproject.toml read (None when none).

  Raises:
    CannotAnswer: `project` names no pyproject.toml with a table, or the
      table is not valid.
  """
  if project is None:
    here = pathlib.Path(os.getcwd()).resolve()
    try:
      found = table.find_pyproject(here)
    except ValueError as error:
      raise CannotAnswer(str(error)) from None
    if found is None:
      said = (
        f"Declarations: no pyproject.toml with a [tool.entangle-jax] table "
        f"found from {here} (give one with --project); only those of "
        "installed packages and built in applied."
      )
    else:
      said = f"Declarations read from {found.resolve()}."
  else:
    given = pathlib.Path(project)
    found = given / "pyproject.toml" if given.is_dir() else given
    if not found.is_file():
      raise CannotAnswer(
        f"--project {project}: no such file (give a pyproject.toml or its "
        "directory)"
      )
    try:
      has_table = table.find_pyproject(found.parent) == found.resolve()
    except ValueError as error:
      raise CannotAnswer(str(error)) from None
    if not has_table:
      raise CannotAnswer(
        f"--project {project}: {found} has no [tool.entangle-jax] table"
      )
    said = f"Declarations read from {found.resolve()} (--project)."
  try:
    declarations = sources.of_pyproject(found.resolve() if found else None)
  except (ValueError, TypeError) as error:
    raise CannotAnswer(str(error)) from None
  return declarations, said, str(found.resolve()) if found else None


def main(
  argv: Sequence[str] | None = None,
  out: TextIO | None = None,
  err: TextIO | None = None,
) -> int:
  """Runs the command; returns its exit status."""
  out = out or sys.stdout
  err = err or sys.stderr
  args = _arguments(argv)
  if args.sanitized_ranks is not None:
    return _sanitized_ranks(args.sanitized_ranks, args.format, out, err)
  if args.ranks:
    return _across_ranks(args, out, err)
  if not args.paths:
    reason = "give a dump directory or a module file"
    if args.format == "json":
      json.dump({"status": 2, "error": reason}, out)
      print(file=out)
    print(f"error: {reason}", file=err)
    return 2
  try:
    declarations, said, pyproject = _declarations(args.project)
    results = check(
      args.paths,
      progress=err,
      declarations=declarations,
      processes=args.processes,
    )
  except CannotAnswer as error:
    return _cannot_answer(error, args.format, out, err)
  run = Run(results, declarations=DeclarationsRead(said, pyproject))
  shown = None if args.all else Options().shown_per_group
  chosen = formats.FORMATS[args.format]
  body = formats.render(args.format, run, Options(shown))
  if body:  # GitHub annotations for a run without races: none.
    print(body, file=out)
  if not chosen.for_people:
    print(sentences.summary(run), file=err)
    print(said, file=err)
  return run.status


def _rank_modules(
  folder: str, declarations: Declarations, rank: int
) -> tuple[
  list[tuple[str, str, RankProgram]],
  dict[int, tuple[str, str, RankProgram | None]],
]:
  """The modules of one rank's dump that communicate: (name, file,
  program), in dump order; and every optimized module by its number
  (name, file, and its program, None where it does not communicate), for
  the rank's execution record (`rank_sequences.executed`).

  Raises:
    CannotAnswer: no such folder, nothing optimized in it, or a module
      the check cannot read.
  """
  found = []
  compiled: dict[int, tuple[str, str, RankProgram | None]] = {}
  for path in sorted(optimized_modules([folder]), key=_module_number):
    try:
      text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
      raise CannotAnswer(f"rank {rank}: {path}: {error}") from None
    try:
      program = RankProgram(text, declarations, rank=rank)
    except (TypeError, ValueError) as error:
      raise CannotAnswer(f"rank {rank}: {path}: {error}") from None
    except Exception as error:  # A crash: "could not answer".
      raise CannotAnswer(_crashed(error, f"rank {rank}: {path}")) from None
    name = dumped_module.module_name(text) or path.name
    communicates = any(True for _ in program.calls())
    if communicates:
      found.append((name, str(path), program))
    number = _module_number(path)[0]
    if number >= 0:
      compiled[number] = (name, str(path), program if communicates else None)
  return found, compiled


def _across_ranks(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
  """``--ranks``: the cross-rank check, one dump per rank, in the format
  ``--format`` names (`formats.FORMATS`, which writes both kinds of run)."""
  try:
    declarations, said, _ = _declarations(args.project)
    read = [
      _rank_modules(folder, declarations, rank)
      for rank, folder in enumerate(args.ranks)
    ]
  except CannotAnswer as error:
    return _cannot_answer(error, args.format, out, err)
  try:
    run = _executions_run(args.ranks, [c for _, c in read], said)
    if isinstance(run, str):  # No record to follow: module by module.
      run = _rank_run(args.ranks, [r for r, _ in read], said, run)
  except BeyondTheModel as error:  # A limit the docs state: no crash.
    beyond = CannotAnswer(
      f"could not answer: {error}; nothing is proved across ranks."
    )
    return _cannot_answer(beyond, args.format, out, err)
  except Exception as error:  # Any crash: "could not answer".
    # A crash of the check is no finding: exit 2 with its cause, never the
    # status of a mismatch (1), which a CI job or the pytest plugin would
    # take for a problem in the program.
    crash = CannotAnswer(_crashed(error, "comparing the ranks"))
    return _cannot_answer(crash, args.format, out, err)
  body = formats.render(args.format, run)
  if body:  # GitHub annotations for a proved run: none.
    print(body, file=out)
  if not formats.FORMATS[args.format].for_people:
    print(sentences.rank_summary(run), file=err)
  print(said, file=err)
  return run.status


def _module_number(path: pathlib.Path) -> tuple[int, str]:
  """A dumped module's place in its process's compile order: XLA's
  ``module_NNNN`` number, as a number (``module_10000`` comes after
  ``module_9999``, though not by name)."""
  found = re.match(r"module_(\d+)\.", path.name)
  return (int(found.group(1)) if found else -1, str(path))


def _crashed(error: Exception, where: str) -> str:
  """Why the cross-rank check could not answer: it crashed at `where`."""
  return (
    f"could not answer: the cross-rank check crashed ({where}: "
    f"{type(error).__name__}: {error}); nothing is proved across ranks. "
    "Please report it with the dumps."
  )


def _rank_run(
  folders: Sequence[str],
  ranks: list[list[tuple[str, str, RankProgram]]],
  said: str,
  no_record: str = "",
) -> RankRun:
  """The cross-rank check of each rank's communicating modules, paired
  in compile order; `no_record` says why no execution record was
  followed."""
  names = [[name for name, _, _ in r] for r in ranks]
  if any(n != names[0] for n in names):
    files = [[file for _, file, _ in r] for r in ranks]
    modules = [from_ranks.modules_differ(folders, names, files)]
  else:
    modules = [
      from_ranks.module_of(
        name,
        [r[k][1] for r in ranks],
        check_programs([r[k][2] for r in ranks]),
      )
      for k, name in enumerate(names[0])
    ]
  most = max((len(n) for n in names), default=0)
  unproved = ""
  if most > 1:
    # Paired in the order each rank compiled them: the dumps hold no
    # record of the order the ranks ran them in, nor of how often.
    unproved = (
      f"a rank compiled {most} communicating modules, each checked against "
      "the other ranks' module of its place in compile order (module "
      "numbers); the dumps do not record in which order, or how many "
      "times, each rank ran them, so a rank that calls them in another "
      "order (g before f) is not seen"
      + (f" ({no_record})." if no_record else ".")
    )
  elif most == 1 and no_record:
    # One module a rank: the dumps do not say how many times each ran it
    # (a Python loop whose count differs between ranks hangs).
    unproved = (
      "each rank's communicating module matches the others', but the "
      "dumps do not record how many times each rank ran it, so a rank "
      f"that runs it more often is not seen ({no_record}). Run the "
      "program under record_executions(DIR) with DIR each rank's dump "
      "folder, or under pytest --entangle-ranks, which keeps that record"
    )
  return RankRun(len(folders), tuple(modules), said, unproved)


def _executions_run(
  folders: Sequence[str],
  compiled: list[dict[int, tuple[str, str, RankProgram | None]]],
  said: str,
) -> RankRun | str:
  """The cross-rank check over each rank's executions, in the order its
  execution record lists them (`rank_sequences`): one sequence a rank.
  Where a rank's record is missing or does not fit its dump, why, in
  words (the modules are then paired by compile order, and several a
  rank prove nothing)."""
  runs = []
  layouts = []
  for rank, folder in enumerate(folders):
    try:
      record = rank_sequences.read_record(folder)
      runs.append(rank_sequences.executed(folder, rank, record, compiled[rank]))
      layouts.append(rank_sequences.read_layouts(folder, rank))
    except rank_sequences.RankRecordMissing as error:
      said = str(error)
      return (
        said if said.startswith(f"rank {rank}:") else f"rank {rank}: {said}"
      )
  if not any(runs):
    return RankRun(len(folders), (), said)
  result = rank_sequences.check_executions(
    [[(name, program) for name, _, program in r] for r in runs], layouts
  )
  files = [
    " then ".join(f"{name} ({file})" for name, file, _ in r) or "none"
    for r in runs
  ]
  module = from_ranks.module_of("the executions of each rank", files, result)
  return RankRun(len(folders), (module,), said)


def _sanitized_ranks(folder: str, fmt: str, out: TextIO, err: TextIO) -> int:
  """``--sanitized-ranks``: the ranks' recorded calls compared."""
  from entangle_jax.testing._sanitize import rank_calls

  try:
    merged = rank_calls.merge_sanitized_ranks(folder)
  except (OSError, ValueError) as error:
    if fmt == "json":
      json.dump({"status": 2, "error": str(error)}, out)
      print(file=out)
    print(f"error: {error}", file=err)
    return 2
  if fmt == "json":
    json.dump(merged.to_json(), out, indent=1)
    print(file=out)
  else:
    print(merged.text(), file=out)
  return merged.status
