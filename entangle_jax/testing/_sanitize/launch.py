"""Which rank of a multi-process launch this process is (``mpirun``,
``mpiexec``, ``srun``), from the variables the launcher sets, and what
names the launch: for the sanitizer's watchdog and its record across
ranks, and for ``pytest --entangle-ranks`` (`launcher_ranks`, which
imports them from here: the sanitizer's stage comes first).
"""

from __future__ import annotations

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


def launch_id(environ: Mapping[str, str]) -> str:
  """What names the launch in `environ` ("" where nothing does)."""
  for name in _LAUNCH:
    if environ.get(name):
      if name == "SLURM_STEP_ID":
        return f"{environ.get('SLURM_JOB_ID', '')}.{environ[name]}"
      return environ[name]
  return ""


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
