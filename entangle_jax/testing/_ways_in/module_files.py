"""Checking a set of dumped module files: finding the optimized modules a
path names, and the races of each (`ModuleResult`). The command, the
dump watch (and so `race_check` and the pytest plugin) all check modules
through here."""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Sequence
from typing import TextIO

from entangle_jax._src.targets import sources
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._analysis.device_processes import ProcessMap
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._findings import platforms
from entangle_jax.testing._findings.from_analysis import module_result
from entangle_jax.testing._findings.records import ModuleResult
from entangle_jax.testing._hlo import dumped_module, parser

OPTIMIZED = "*after_optimizations.txt"
PROGRESS_EVERY = 100


class CannotAnswer(Exception):
  """The check cannot answer at all (no such path, nothing to read); the
  message says why (exit status 2). One module it cannot answer for is a
  `ModuleResult` with its reason instead."""


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


BEFORE_OPTIMIZATIONS = "before_optimizations.txt"

UNSEEN = (
  "XLA dumped no module before optimization beside it (module_NNNN.*"
  f"{BEFORE_OPTIMIZATIONS}, which XLA dumps with --xla_dump_hlo_as_text): "
  "checked as XLA optimized it, so races that XLA's optimizer hid by "
  "moving a call out of a loop, merging or deleting it are not seen"
)


def _before_optimizations(path: pathlib.Path) -> str | None:
  """The text of the module before optimization that XLA dumped beside
  the optimized module in `path` (same ``module_NNNN.`` prefix, and the
  same module name where two backends dumped modules of one number: XLA
  numbers the modules of each backend apart, so a TPU program's
  module_0070 and a CPU one's can lie side by side); None if there is not
  exactly one or it cannot be read."""
  prefix = re.match(r"module_\d+\.", path.name)
  if prefix is None:
    return None
  found = _modules_before_optimizations(path.parent, prefix.group(0))
  before = found.get(prefix.group(0), [])
  if len(before) > 1:
    name = _module_name(path.name)
    before = [b for b in before if _module_name(b.name) == name]
  if len(before) != 1:
    return None
  try:
    return before[0].read_text()
  except (OSError, UnicodeDecodeError):
    return None


def _module_name(file_name: str) -> str:
  """The module's name in a dumped file's name: what follows
  ``module_NNNN.`` up to the next dot (``jit_f``)."""
  return file_name.split(".", 2)[1] if file_name.count(".") >= 2 else ""


def _modules_before_optimizations(
  directory: pathlib.Path, prefix: str
) -> dict[str, list[pathlib.Path]]:
  """The modules before optimization in `directory`, by their
  ``module_NNNN.`` prefix: listed once per state of the directory (its
  modification time), not once per module, which made a dump of many
  modules cost the square of their number."""
  try:
    state = (directory.resolve(), directory.stat().st_mtime_ns)
  except OSError:
    return {}
  # A module this listing lacks may have come within the same tick.
  if _LISTED.get("state") != state or prefix not in _LISTED["found"]:
    found: dict[str, list[pathlib.Path]] = {}
    for name in os.listdir(directory):
      numbered = re.match(r"module_\d+\.", name)
      if numbered and name.endswith(BEFORE_OPTIMIZATIONS):
        found.setdefault(numbered.group(0), []).append(directory / name)
    _LISTED.clear()
    _LISTED.update(state=state, found=found)
  return _LISTED["found"]


# The last directory listed by `_modules_before_optimizations`, and what
# it held: a dump's modules are checked one directory at a time.
_LISTED: dict = {}


def check_module(
  path: pathlib.Path,
  declarations: Declarations,
  processes: ProcessMap | None = None,
) -> ModuleResult:
  """The races of the module in file `path`; a module the check cannot
  answer for (its file cannot be read, its text is not an optimized
  module or is cut short, a declaration does not fit it) comes back with
  the reason in `ModuleResult.unchecked`, so that one
  module never stops the check of the others (the reason does not repeat
  the path, which the result holds). `processes` says which process runs
  each device (``--processes``); a map that does not fit the module's
  devices is such a reason."""
  name_in_path = path.name
  result = ModuleResult(
    str(path), name_in_path, platforms.of_file_name(path.name), 0
  )
  try:
    text = path.read_text()
  except (OSError, UnicodeDecodeError) as error:
    result.unchecked = f"cannot read it: {error}"
    return result
  result.module = dumped_module.module_name(text) or name_in_path
  if result.platform is None and (row := dumped_module.platform_of(text)):
    result.platform = platforms.of_row(row)
  if not dumped_module.has_native_calls(text):  # Nothing to race.
    result.unchecked = dumped_module.why_unreadable(text)
    return result
  try:
    before = _before_optimizations(path)
    if dumped_module.needs_before(text):
      text = dumped_module.completed(text, before)
    # The module before optimization is the program's own order: with it
    # the check also sees the races XLA's optimizer hid.
    analysis = OrderAnalysis(
      text,
      declarations=declarations,
      before_optimization=before,
      processes=processes,
    )
    native_calls = len(analysis.user_native_calls())
    if native_calls:
      races = analysis.races()
      return module_result(
        result.path,
        result.module,
        result.platform,
        native_calls,
        races,
        races.left_out,
        races.declared,
        unseen=None if races.unseen is None else UNSEEN,
      )
    result.native_calls = native_calls
  except parser.NotScheduledError as error:
    # Advice for a reader of files, not for a Python caller.
    result.unchecked = dumped_module.FILE_NOT_SCHEDULED.format(what=error.what)
  except ValueError as error:
    result.unchecked = str(error)
  except Exception as error:  # A bug of ours must not stop the user's run.
    result.unchecked = (
      f"the race check failed on it ({type(error).__name__}: "
      f"{error}); this is a bug in entangle-jax, please report it with "
      "the module file"
    )
  return result


def check(
  paths: Sequence[str],
  progress: TextIO | None = None,
  declarations: Declarations | None = None,
  processes: ProcessMap | None = None,
) -> list[ModuleResult]:
  """Checks every optimized module under `paths`, with `declarations`
  (those in effect, `sources.current`, by default) and the map of
  processes (`check_module`); reports progress on
  `progress` for many modules. A module that cannot be checked is in the
  list with its reason (`ModuleResult.unchecked`); the others are checked
  all the same.

  Raises:
    CannotAnswer: see `optimized_modules`.
  """
  files = optimized_modules(paths)
  declarations = sources.current() if declarations is None else declarations
  results = []
  for n, path in enumerate(files, 1):
    results.append(check_module(path, declarations, processes))
    many = progress is not None and len(files) > PROGRESS_EVERY
    if many and (n % PROGRESS_EVERY == 0 or n == len(files)):
      print(f"checked {n}/{len(files)} modules", file=progress)
  return results
