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

from entangle_jax.testing._sanitize.launch import launch_id, rank_and_size


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
