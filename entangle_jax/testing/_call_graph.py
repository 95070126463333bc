"""Where each computation is called from: chains of call sites to an op."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from entangle_jax.testing import _hlo_parse
from entangle_jax.testing._ops import Op

# Beyond this many call-site chains to one computation, nothing is concluded
# about its ops (a computation shared by very many call sites).
PATH_LIMIT = 64

CallPath = tuple[Op, ...]
"""Call sites from the entry computation down to an op, then the op."""


class CallGraph:
  """The call sites of every computation of one parsed module.

  Args:
    module: the parsed module.
    instructions: every instruction of the module.
    op_of: the `Op` an instruction is part of (async pairs are one op, so a
      call site may be an async start).
  """

  def __init__(
    self,
    module: _hlo_parse.Module,
    instructions: Iterable[_hlo_parse.Instruction],
    op_of: Callable[[_hlo_parse.Instruction], Op],
  ):
    self._entry = module.entry
    self._callers: dict[str, list[Op]] = {}
    for instruction in instructions:
      for callee in instruction.callees:
        sites = self._callers.setdefault(callee, [])
        site = op_of(instruction)
        if site not in sites:
          sites.append(site)
    self._site_paths = functools.cache(self._find_site_paths)

  def call_paths(self, op: Op) -> list[CallPath]:
    """Chains of call sites from the entry computation down to `op`, each
    ending in `op`; empty when there are more than `PATH_LIMIT`."""
    return [(*path, op) for path in self._site_paths(op.computation)]

  def _find_site_paths(self, computation: str) -> list[tuple[Op, ...]]:
    if computation == self._entry:
      return [()]
    paths = []
    for site in self._callers.get(computation, []):
      paths.extend((*path, site) for path in self._site_paths(site.computation))
      if len(paths) > PATH_LIMIT:
        return []
    return paths
