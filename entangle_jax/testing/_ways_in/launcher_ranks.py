"""Which rank of a multi-process launch this process is (``mpirun``,
``mpiexec``, ``srun``), from the variables the launcher sets, and the
folder the ranks of one launch meet in: for ``pytest --entangle-ranks``,
where each rank dumps its modules and rank 0 checks them across ranks
once every rank has finished (`Ranks.finished`, `Ranks.wait`).

Each rank dumps to ``DIR/rankR`` and, when its tests are done, writes
``DIR/rankR.done`` holding the launch's id (`launch_id`), so that rank 0
never takes a marker a former launch left for its own.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import time
from collections.abc import Mapping

# (rank, size) variables, the first pair set wins: Open MPI, PMIx, MPICH
# and Intel MPI (Hydra's PMI), Slurm.
_RANK_SIZE = (
  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
  ("PMI_RANK", "PMI_SIZE"),
  ("SLURM_PROCID", "SLURM_NTASKS"),
)
# What names one launch: Open MPI and PMIx, Slurm's job and step.
_LAUNCH = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_STEP_ID")


@dataclasses.dataclass(frozen=True)
class Ranks:
  """This process's place in a launch, and the folder its ranks share.

  Attributes:
    rank: this process's rank, from 0.
    size: how many ranks the launch has.
    folder: the folder every rank can see (``--entangle-ranks``).
    launch: the launch's id (`launch_id`; "" where the launcher sets none).
  """

  rank: int
  size: int
  folder: pathlib.Path
  launch: str

  def dump(self, rank: int | None = None) -> pathlib.Path:
    """Where `rank` (this one's by default) dumps its modules."""
    return self.folder / f"rank{self.rank if rank is None else rank}"

  def _marker(self, rank: int) -> pathlib.Path:
    return self.folder / f"rank{rank}.done"

  def start(self) -> pathlib.Path:
    """Empties this rank's dump folder and removes its marker (a former
    launch's); returns the folder."""
    self._marker(self.rank).unlink(missing_ok=True)
    shutil.rmtree(self.dump(), ignore_errors=True)
    self.dump().mkdir(parents=True, exist_ok=True)
    return self.dump()

  def finished(self) -> None:
    """Says that this rank's modules are all dumped."""
    self._marker(self.rank).write_text(self.launch)

  def wait(self, timeout_s: float, poll_s: float = 0.2) -> list[int]:
    """Waits until every rank of this launch has finished, at most
    `timeout_s` seconds; the ranks that had not (none: all did)."""
    deadline = time.monotonic() + timeout_s
    while True:
      late = [r for r in range(self.size) if not self._done(r)]
      if not late or time.monotonic() >= deadline:
        return late
      time.sleep(poll_s)

  def _done(self, rank: int) -> bool:
    try:
      return self._marker(rank).read_text() == self.launch
    except OSError:
      return False


def launch_id(environ: Mapping[str, str]) -> str:
  """What names the launch in `environ` ("" where nothing does)."""
  for name in _LAUNCH:
    if environ.get(name):
      if name == "SLURM_STEP_ID":
        return f"{environ.get('SLURM_JOB_ID', '')}.{environ[name]}"
      return environ[name]
  return ""


def from_environment(
  folder: str | os.PathLike, environ: Mapping[str, str] | None = None
) -> Ranks | None:
  """This process's `Ranks` in a launch of two ranks or more, by the
  launcher's variables in `environ` (``os.environ`` by default); None
  where no launcher set them, or it launched one process.

  Raises:
    ValueError: a launcher's variable is not a rank below its size.
  """
  environ = os.environ if environ is None else environ
  found = rank_and_size(environ)
  if found is None or found[1] < 2:
    return None
  rank, size = found
  return Ranks(rank, size, pathlib.Path(folder), launch_id(environ))


def rank_and_size(environ: Mapping[str, str]) -> tuple[int, int] | None:
  """(rank, size) by the launcher's variables in `environ` (the first pair
  set wins); None where no launcher set them.

  Raises:
    ValueError: a launcher's variable is not a rank below its size.
  """
  for rank_name, size_name in _RANK_SIZE:
    if rank_name in environ and size_name in environ:
      try:
        rank, size = int(environ[rank_name]), int(environ[size_name])
      except ValueError:
        raise ValueError(
          f"${rank_name}={environ[rank_name]!r} and ${size_name}="
          f"{environ[size_name]!r} are not a rank and a size"
        ) from None
      if not 0 <= rank < size:
        raise ValueError(
          f"${rank_name}={rank} is not a rank of ${size_name}={size}"
        )
      return rank, size
  return None
