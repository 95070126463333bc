"""The platform a dumped module was compiled for, from the name XLA gave
its file, and which runtime runs it.

XLA names an optimized module's dump file after the device it compiled
for: ``module_0001.jit_f.cpu_after_optimizations.txt`` on CPU,
``...sm_9.0a_gpu_after_optimizations.txt`` on CUDA (compute capability 9.0a,
written ``sm_90a`` by CUDA), ``...gfx942_gpu_after_optimizations.txt`` on
ROCm. On TPU the name holds no platform word but a ``cl_NNN`` part that
the TPU compiler writes (``module_0003.jit_f.cl_933746096.after_
optimizations.txt``, jax 0.10.2 on a TPU v5e), and the module's layouts
carry TPU's tiling (``f32[8]{0:T(128)}``): `of_file_name` reads the first,
``entangle_jax.testing._hlo.dumped_module.platform_of`` the second, each
from the platform table (``entangle_jax._src.targets.platforms``: a row's
`file_name`, `dump_words` and `text_mark`). A
module XLA loaded from JAX's persistent compilation cache is dumped as
``...after_optimizations.txt``, with no platform.
"""

from __future__ import annotations

import dataclasses
import re

from entangle_jax._src.targets import platforms as table

# The runtimes, as the table names them, for this stage's readers.
from entangle_jax._src.targets.platforms import CPU_RUNTIME as CPU_RUNTIME
from entangle_jax._src.targets.platforms import GPU_RUNTIME as GPU_RUNTIME
from entangle_jax._src.targets.platforms import TPU_RUNTIME as TPU_RUNTIME

# Any platform the table's file names do not match: the part of the name
# between the last dot and the suffix, as written.
_OTHER = re.compile(r"\.(?P<written>[^.]+?)_after_optimizations\.txt$")


@dataclasses.dataclass(frozen=True)
class Platform:
  """The platform a module was compiled for, as its file names it."""

  written: str
  """As in the file name: ``cpu``, ``sm_9.0a_gpu``, ``gfx942_gpu``."""
  vendor: str | None = None
  """``CUDA`` or ``ROCm`` for a GPU whose maker the name says; else None."""
  device: str | None = None
  """The GPU's architecture as its maker writes it: ``sm_90a`` (CUDA),
  ``gfx942`` (ROCm); else None."""

  @property
  def row(self) -> table.Platform | None:
    """Its row of the platform table, or None for a platform the check
    does not know."""
    return table.of_dump_word(self.written, self.vendor)

  @property
  def runtime(self) -> str | None:
    """The XLA runtime that runs the module (`CPU_RUNTIME`,
    `GPU_RUNTIME`, `TPU_RUNTIME`), or None for a platform the check does
    not know."""
    row = self.row
    return row.runtime if row is not None else None

  def __str__(self) -> str:
    """How reports name it: ``cpu``, ``CUDA sm_90a``, ``ROCm gfx942``,
    ``TPU``; any other as written."""
    if self.vendor is not None and self.device is not None:
      return f"{self.vendor} {self.device}"
    row = self.row
    if row is not None and row.shown is not None:
      return row.shown
    return self.written


def of_row(row: table.Platform) -> Platform:
  """`row`'s platform as a file that names no device writes it."""
  return Platform(row.name)


CPU = of_row(table.CPU)
TPU = of_row(table.TPU)
"""A TPU: its file name has a ``cl_NNN`` part and no platform word, or
its text has TPU's tiled layouts."""


def of_file_name(name: str) -> Platform | None:
  """The platform of the optimized module dumped in a file called `name`;
  None when the name gives none (a module loaded from JAX's persistent
  compilation cache, or a file named otherwise)."""
  if matched := table.of_file_name(name):
    row, found = matched
    if row.device_of is None:
      return of_row(row)
    return Platform(found["written"], row.vendor, row.device_of(found))
  if found := _OTHER.search(name):
    return Platform(found["written"])
  return None
