"""The text of a module XLA dumped: what can be said of it before it is
parsed (its name, whether it holds a native call, whether it is whole),
and what the optimized module leaves out that the module before
optimization beside it still says. Text only: finding and reading the
files is `entangle_jax.testing._ways_in.module_files`' work."""

from __future__ import annotations

import re

from entangle_jax._src.targets import platforms
from entangle_jax.testing._hlo import entry_shardings, host_callbacks, parser

_MODULE_NAME = re.compile(r"HloModule\s+([^\s,]+)")


def module_name(text: str) -> str | None:
  """The name on the module's ``HloModule`` line, if it has one."""
  found = _MODULE_NAME.search(text[:2000])
  return found.group(1) if found else None


def platform_of(text: str) -> platforms.Platform | None:
  """The platform table's row for the platform module `text` says it was
  compiled for (`platforms.of_text`: TPU's tiled layouts), or None."""
  return platforms.of_text(text)


def has_native_calls(text: str) -> bool:
  """Whether the module may hold a native call: a custom call, or a host
  callback's transfers (TPU's form of it)."""
  return "custom-call" in text or host_callbacks.has_host_transfers(text)


FILE_NOT_SCHEDULED = (
  "{what}. The check reads XLA's optimized, scheduled modules: the files "
  "*after_optimizations.txt of a dump made with "
  'XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text"; pass the dump '
  "folder, or one of those files."
)
"""Why a file is no optimized module, for a reader of files (the command,
the pytest plugin's dumps): what to pass instead is a file, not a
``jax.stages.Compiled`` as `parser.NOT_SCHEDULED` tells a Python caller."""


def why_unreadable(text: str) -> str | None:
  """Why a module with no native call cannot be answered for (empty, not
  an optimized module, cut short), or None when it is whole. A file cut
  short (a dump interrupted, a copy gone wrong) may have lost the calls
  that race: no answer rather than "no race"."""
  if not text.strip():
    return (
      "the file is empty: XLA did not finish writing it (a process stopped "
      "while dumping), or it is not a module"
    )
  try:
    parser.check_header(text)
  except parser.NotScheduledError as error:
    return FILE_NOT_SCHEDULED.format(what=error.what)
  except ValueError as error:
    return str(error)
  if "\nENTRY " not in text or not text.rstrip().endswith("}"):
    return (
      "the module text is cut short (no ENTRY computation, or its last "
      "computation never closes)"
    )
  return None


def needs_before(text: str) -> bool:
  """Whether `completed` would take anything from the module before
  optimization (so that a dump's other file is read only then)."""
  return entry_shardings.missing(text) or host_callbacks.has_transfer_callbacks(
    text
  )


def completed(text: str, before: str | None) -> str:
  """The optimized `text` with what it leaves out taken from `before`, the
  module before optimization XLA dumped beside it (None: not there):
  the entry parameters' shardings that jax 0.11 and newer no longer print
  (`entry_shardings`), and, for a module whose host callbacks are host
  transfers (a TPU's), the order ``optimization_barrier`` gives them
  (`host_callbacks.complete`)."""
  if before is None:
    return text
  if entry_shardings.missing(text):
    text = entry_shardings.complete(text, entry_shardings.from_text(before))
  if host_callbacks.has_transfer_callbacks(text):
    text = host_callbacks.complete(text, before)
  return text
