"""Declarations entangle-jax ships for bindings people use: one table, each
entry read from the binding's own source, and applied only where that
distribution is installed at a version the entry was checked against.

Each `ShippedBinding` names the distribution, the versions checked
(``first`` to ``last``, both included), the repository read, and per
target (`ShippedTarget`) the file and function read and why the
declaration holds. A target whose behaviour could not be established is
listed in ``undeclared`` with the reason, and stays undeclared.

Precedence (`entangle_jax._src.targets.sources.current`): the project's
``[tool.entangle-jax]`` table, then code, then a binding's own published
entry point, then this table, then what is built in. At a version outside
the range the binding's calls are treated as today (undeclared), and
reports say so (`note_for`). ``docs/finding_races.md`` lists the table
(`markdown`; ``tools/rule_docs.py`` writes it there).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re

from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.declaration import (
  Declarations,
  PythonArgument,
  TargetDeclaration,
  TargetMode,
  merged,
  pattern_matches,
)


@dataclasses.dataclass(frozen=True)
class ShippedTarget:
  """One declaration of a shipped binding, with where it was read."""

  pattern: str
  mode: TargetMode
  read: str
  """The file and function it was read from."""
  reason: str
  object: int | None = None
  returns_object: tuple[int, ...] = ()
  argument: PythonArgument | None = None
  """The argument of the binding's Python function that carries the
  object, read from its Python source."""
  communicates: Communication | None = None
  """How its calls talk to other ranks, for the cross-rank check."""


@dataclasses.dataclass(frozen=True)
class ShippedBinding:
  """The declarations of one distribution, at the versions checked."""

  distribution: str
  first: str
  last: str
  """The versions checked, both included."""
  repository: str
  checked: str
  """What was read or measured at which version."""
  targets: tuple[ShippedTarget, ...]
  undeclared: tuple[tuple[str, str], ...] = ()
  """Targets left undeclared: (pattern, why)."""

  @property
  def versions(self) -> str:
    """The range as written in reports."""
    if self.first == self.last:
      return self.first
    return f"{self.first}\N{EN DASH}{self.last}"

  def covers(self, version: str) -> bool:
    """Whether `version` of the distribution is in the range checked."""
    release, first, last = (
      _release(v) for v in (version, self.first, self.last)
    )
    if release is None or first is None or last is None:
      return False
    return first <= release <= last

  def matches(self, target: str) -> bool:
    """Whether `target` is one of this binding's (declared or not)."""
    patterns = [t.pattern for t in self.targets] + [
      p for p, _ in self.undeclared
    ]
    return any(pattern_matches(p, target) for p in patterns)

  def declarations(self) -> Declarations:
    """The entries as declarations, each naming this table as source."""
    return Declarations(
      tuple(
        TargetDeclaration(
          t.pattern,
          t.mode,
          object=t.object,
          returns_object=t.returns_object,
          argument=t.argument,
          communicates=t.communicates,
          source=(
            f"shipped: {self.distribution} {self.versions} "
            f"({self.repository} {t.read})"
          ),
        )
        for t in self.targets
      )
    )


def _release(version: str) -> tuple[int, ...] | None:
  """The release numbers of `version` (``0.5.2`` of ``0.5.2.post1``);
  None for a version that does not start with one."""
  found = re.match(r"\d+(?:\.\d+)*", version.strip())
  if found is None:
    return None
  numbers = tuple(int(n) for n in found.group().split("."))
  return numbers + (0,) * (3 - len(numbers))


_KLU = "klujax.cpp"
_KLU_SOLVE = (
  "klu_solve (klu_z_solve) solves in place in the Numeric object's "
  "workspace (Numeric->Xwork): two solves on one handle overwrite it"
)
_KLU_READ_SYMBOLIC = (
  "reads the Symbolic object (klu_factor takes it as input); its own "
  "Numeric objects and workspace are made and freed in the call"
)
_KLU_PURE = (
  "analyzes, factors, solves and frees within the call (a local "
  "klu_common): no state outlives it"
)
_KLU_REFACTOR = (
  "klu_refactor overwrites the Numeric objects in place, and the call "
  "hands the same handles back as result {result}"
)


def _klu_argument(function: str, position: int, name: str) -> PythonArgument:
  """The argument of klujax's function that carries the handle (klujax.py,
  0.5.2: ``solve_with_numeric(numeric, b, symbolic)``,
  ``refactor(Ai, Aj, Ax, numeric, symbolic)``, ...); a ``KLUNumeric`` or
  ``KLUSymbolic`` there, or the handle array."""
  return PythonArgument(f"klujax.{function}", position, name)


def _klu_targets() -> tuple[ShippedTarget, ...]:
  found = []
  for kind in ("f64", "c128"):
    found += [
      ShippedTarget(
        f"dot_{kind}",
        "none",
        f"{_KLU} dot_impl",
        "a sparse matrix-vector product from its operand buffers",
      ),
      ShippedTarget(f"solve_{kind}", "none", f"{_KLU} solve_impl", _KLU_PURE),
      ShippedTarget(
        f"solve_with_symbol_{kind}",
        "read",
        f"{_KLU} solve_with_symbol_impl",
        _KLU_READ_SYMBOLIC + " (symbolic handle: operand 4)",
        object=4,
        argument=_klu_argument("solve_with_symbol", 4, "symbolic"),
      ),
      ShippedTarget(
        f"tsolve_with_symbol_{kind}",
        "read",
        f"{_KLU} tsolve_with_symbol_impl",
        _KLU_READ_SYMBOLIC + " (symbolic handle: operand 4)",
        object=4,
        argument=_klu_argument("tsolve_with_symbol", 4, "symbolic"),
      ),
      ShippedTarget(
        f"factor_{kind}",
        "read",
        f"{_KLU} factor_impl",
        "klu_factor reads the Symbolic object (operand 3) and returns new "
        "Numeric objects, one per batch element",
        object=3,
        argument=_klu_argument("factor", 3, "symbolic"),
      ),
      ShippedTarget(
        f"refactor_{kind}",
        "write",
        f"{_KLU} refactor_impl",
        _KLU_REFACTOR.format(result=0) + " (numeric handles: operand 4)",
        object=4,
        returns_object=(0,),
        argument=_klu_argument("refactor", 3, "numeric"),
      ),
      ShippedTarget(
        f"refactor_and_solve_{kind}",
        "write",
        f"{_KLU} refactor_and_solve_impl",
        _KLU_REFACTOR.format(result=1)
        + ", then klu_solve uses its workspace (numeric handles: operand 5)",
        object=5,
        returns_object=(1,),
        argument=_klu_argument("refactor_and_solve", 4, "numeric"),
      ),
      ShippedTarget(
        f"solve_with_numeric_{kind}",
        "write",
        f"{_KLU} solve_with_numeric_impl",
        _KLU_SOLVE + " (operands: symbolic 0, numeric 1, b 2)",
        object=1,
        argument=_klu_argument("solve_with_numeric", 0, "numeric"),
      ),
      ShippedTarget(
        f"tsolve_with_numeric_{kind}",
        "write",
        f"{_KLU} tsolve_with_numeric_impl",
        "klu_tsolve, like klu_solve, works in Numeric->Xwork (operands: "
        "symbolic 0, numeric 1, b 2)",
        object=1,
        argument=_klu_argument("tsolve_with_numeric", 0, "numeric"),
      ),
    ]
  found.append(
    ShippedTarget(
      "analyze",
      "none",
      f"{_KLU} analyze",
      "klu_analyze makes a new Symbolic object from the operand buffers "
      "(a local klu_common); nothing else holds it yet",
    )
  )
  return tuple(found)


_MPI_READ = "mpi4jax/_src/collective_ops/{}.py _mpi_{}_xla_encode"
_MPI_WHY = (
  "an MPI call through the process's MPI state, like every mpi4jax call; "
  "it communicates: {}"
)


def _mpi_target(name: str, communicates: Communication) -> ShippedTarget:
  """One mpi4jax target: the ``ffi_lowering`` of ``{name}.py`` passes the
  communicator as attribute ``comm`` (``to_mpi_handle``, an address), and
  peers, tags, roots and the reduction as attributes too."""
  return ShippedTarget(
    f"mpi_{name}_ffi",
    "write",
    _MPI_READ.format(name, name),
    _MPI_WHY.format(communicates),
    communicates=communicates,
  )


def _mpi_targets() -> tuple[ShippedTarget, ...]:
  comm = "comm"
  return (
    _mpi_target(
      "allreduce",
      Communication(communicator=comm, op="op", same_result=True),
    ),
    _mpi_target(
      "allgather", Communication(communicator=comm, same_result=True)
    ),
    _mpi_target("alltoall", Communication(communicator=comm)),
    _mpi_target("barrier", Communication(communicator=comm)),
    _mpi_target(
      "bcast",
      # The root gets its own operand back (mpi4jax's bcast returns it):
      # a decision on it reads what every rank receives.
      Communication(communicator=comm, same_result=True, root="root"),
    ),
    _mpi_target("gather", Communication(communicator=comm, match=("root",))),
    _mpi_target(
      "reduce", Communication(communicator=comm, op="op", match=("root",))
    ),
    _mpi_target("scan", Communication(communicator=comm, op="op")),
    # mpi4jax's root passes (nproc, *block) and every other rank a block:
    # MPI matches the block each receives, its result.
    _mpi_target(
      "scatter",
      Communication(communicator=comm, match=("root",), matched_by="results"),
    ),
    _mpi_target(
      "send", Communication("send", communicator=comm, peer="dest", tag="tag")
    ),
    _mpi_target(
      "recv",
      Communication("recv", communicator=comm, peer="source", tag="tag"),
    ),
    _mpi_target(
      "sendrecv",
      Communication(
        "sendrecv",
        communicator=comm,
        peer="dest",
        tag="sendtag",
        source="source",
        source_tag="recvtag",
      ),
    ),
  )


BINDINGS: tuple[ShippedBinding, ...] = (
  ShippedBinding(
    distribution="klujax",
    first="0.5.0",
    last="0.5.2",
    repository="flaport/klujax",
    checked=(
      "C++ (klujax.cpp) and Python (klujax.py) at tag 0.5.0; the 0.5.2 "
      "wheel's klujax.py (the same operand order for every FFI call); "
      "programs measured with 0.5.2 on jax 0.10.2"
    ),
    targets=_klu_targets(),
  ),
  ShippedBinding(
    distribution="jax-finufft",
    first="1.3.1",
    last="1.3.1",
    repository="flatironinstitute/jax-finufft",
    checked=(
      "lib/jax_finufft_cpu.cc and lib/kernels.cc.cu (run_nufft, CPU and "
      "CUDA, at the repository's head), jax_finufft/lowering.py (the 1.3.1 "
      "wheel: target names); programs measured with 1.3.1 (CPU) on jax "
      "0.10.2"
    ),
    targets=(
      ShippedTarget(
        "nufft[123]d[123]*",
        "none",
        "lib/jax_finufft_cpu.cc run_nufft",
        "each call makes its own FINUFFT plan (makeplan), sets points, "
        "executes and destroys it: no plan outlives a call (on CUDA too: "
        "lib/kernels.cc.cu run_nufft, a cuFINUFFT plan per call)",
      ),
    ),
  ),
  ShippedBinding(
    distribution="mpi4jax",
    first="0.9.1",
    last="0.9.1",
    repository="mpi4jax/mpi4jax",
    checked=(
      "mpi4jax/_src/xla_bridge/mpi_xla_bridge_cpu.cpp and "
      "mpi4jax/_src/collective_ops/*.py in the 0.9.1 sdist (the attributes "
      "each ffi_lowering passes: at tag v0.9.1 of the repository)"
    ),
    targets=(
      *_mpi_targets(),
      ShippedTarget(
        "mpi_*_ffi",
        "write",
        "mpi4jax/_src/xla_bridge/mpi_xla_bridge_cpu.cpp mpi_*_ffi_impl",
        "every call communicates through the process's MPI state (the "
        "communicator is an attribute, not an operand, and MPI matches "
        "messages in call order): any two may conflict, across devices "
        "too; mpi4jax orders them with an ordered effect's token",
      ),
    ),
  ),
)
"""Every shipped binding."""


def _installed(distribution: str) -> str | None:
  try:
    return importlib.metadata.version(distribution)
  except importlib.metadata.PackageNotFoundError:
    return None


@functools.lru_cache(maxsize=1)
def installed() -> tuple[tuple[ShippedBinding, str], ...]:
  """The shipped bindings installed, each with its installed version."""
  found = []
  for binding in BINDINGS:
    version = _installed(binding.distribution)
    if version is not None:
      found.append((binding, version))
  return tuple(found)


def applied() -> Declarations:
  """The declarations of the bindings installed at a covered version."""
  return _applied(installed())


@functools.lru_cache(maxsize=4)
def _applied(
  found: tuple[tuple[ShippedBinding, str], ...],
) -> Declarations:
  """`applied` for the bindings `found` installed: built once, since the
  race check asks for it on every module it reads (building it took half
  the time of finding the declarations in effect)."""
  return merged(
    [b.declarations() for b, v in found if b.covers(v)],
    distinct=False,
  )


def note_for(target: str) -> str | None:
  """For a target of a shipped binding installed at a version the table
  does not cover: a line saying so; else None."""
  for binding, version in installed():
    if not binding.covers(version) and binding.matches(target):
      return (
        f"{binding.distribution} {version} is installed; entangle-jax's "
        f"declarations cover {binding.versions}, so its calls are "
        "undeclared here."
      )
  return None


def markdown() -> str:
  """The table as Markdown, for ``docs/finding_races.md``."""
  lines = [
    "| Distribution | Versions | Target | Mode | Object | Read from | Why |",
    "|---|---|---|---|---|---|---|",
  ]
  for b in BINDINGS:
    for t in b.targets:
      what = "the library" if t.object is None else f"operand {t.object}"
      if t.returns_object:
        what += f", returned as result {list(t.returns_object)}"
      if t.mode == "none":
        what = "none"
      lines.append(
        f"| {b.distribution} | {b.versions} | `{t.pattern}` | {t.mode} | "
        f"{what} | {b.repository} `{t.read}` | {t.reason} |"
      )
    for pattern, why in b.undeclared:
      lines.append(
        f"| {b.distribution} | {b.versions} | `{pattern}` | undeclared | "
        f"| {b.repository} | {why} |"
      )
  return "\n".join(lines) + "\n"
