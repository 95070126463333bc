"""Whether XLA's own collectives need every process to run the same
module, and the module's identity that the cross-rank check then compares.

Measured on CPU (gloo over loopback, two ``jax.distributed`` processes,
one device each): with jaxlib 0.12.1, two processes whose modules differ
in anything (one constant, or only the source line in an op's metadata)
hang in their first all-reduce, in 3 of 3 runs each; with jaxlib 0.12.0.1
the same programs run to the right values. So from 0.12.1 on, the module
is part of what must be equal on every rank for an XLA collective to meet
its peers, as a collective's shapes are. A native call (mpi4jax, an FFI
binding) meets its peers through the library it calls, whatever the
modules are, so this holds for XLA's collectives only.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import re

SAME_MODULE_SINCE = (0, 12, 1)
"""The first jaxlib whose XLA collectives were seen to need it."""


def _release(version: str) -> tuple[int, ...]:
  numbers = re.match(r"\d+(?:\.\d+)*", version)
  return tuple(int(n) for n in numbers.group().split(".")) if numbers else ()


@functools.cache
def installed_jaxlib() -> str:
  """The installed jaxlib's version: the one that compiles (and, run where
  the ranks ran, runs) the modules checked."""
  return importlib.metadata.version("jaxlib")


def collectives_need_same_module(jaxlib: str | None = None) -> bool:
  """Whether XLA's collectives in jaxlib `jaxlib` (the installed one by
  default) meet only between processes that run the same module."""
  version = installed_jaxlib() if jaxlib is None else jaxlib
  return _release(version) >= SAME_MODULE_SINCE


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleIdentity:
  """A rank's module as an XLA collective's fingerprint holds it: equal
  when the texts are, and shown by a digest of the text."""

  text: str

  @functools.cached_property
  def digest(self) -> str:
    return hashlib.sha256(self.text.encode()).hexdigest()[:12]

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, ModuleIdentity):
      return NotImplemented
    return self.digest == other.digest

  def __hash__(self) -> int:
    return hash(self.digest)

  def __str__(self) -> str:
    return f"module {self.digest}"

  def difference(self, other: ModuleIdentity, rank: int) -> str:
    """Where `other` (rank `rank`'s module) first differs from this one
    (rank 0's), and why that matters, in words."""
    mine, theirs = self.text.splitlines(), other.text.splitlines()
    line = next(
      (k for k, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
      min(len(mine), len(theirs)),
    )

    def shown(lines: list[str]) -> str:
      text = lines[line].strip() if line < len(lines) else "(end of module)"
      return text if len(text) <= 100 else text[:97] + "..."

    return (
      f"module: the ranks run different modules, first at line {line + 1} "
      f"(rank 0: `{shown(mine)}`; rank {rank}: `{shown(theirs)}`). With "
      f"jaxlib {'.'.join(map(str, SAME_MODULE_SINCE))} and later, XLA's "
      "collectives meet only between processes that run the same module "
      "(a different constant or source line is enough): every rank hangs "
      "at this collective"
    )
