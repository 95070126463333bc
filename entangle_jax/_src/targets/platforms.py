"""The platforms entangle-jax knows, one row each: every fact a stage needs
of a platform, so that a new platform is a row here plus, where entangle
does not lower to its FFI custom call, its kernel module.

A row says how ``entangle`` lowers there (`Platform.kernel`), the name
entangle's FFI handler is registered under (`Platform.ffi_name`), the
names JAX and XLA give it (`Platform.jax_names`, `Platform.xla_names`),
XLA's host-callback targets there (`Platform.callback_device`,
`Platform.transfer_target`), how a dumped module's file name and text
identify it (`Platform.dump_words`, `Platform.file_name`,
`Platform.text_mark`), which XLA runtime runs its modules and what the
race check assumes of it (`Platform.runtime`, `Platform.model`), how
reports name it (`Platform.vendor`, `Platform.shown`) and what the
sanitizer can do there (`Platform.host_side`, `Platform.execution_op`,
`Platform.one_stream`).

The stages look a platform up by the name they hold (`of_jax_name`,
`of_xla_name`, `of_dump_word`, `of_file_name`, `of_text`) and read its
row; none compares against a platform's name itself
(tests/repository/platform_table_test.py). Plain data, as the rest of
``_src/targets``: importing it loads no extension and no JAX, so every
stage, the race check's included, may read it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

CPU_RUNTIME = "XLA:CPU"
GPU_RUNTIME = "XLA:GPU"
TPU_RUNTIME = "XLA:TPU"

_SUFFIX = r"_after_optimizations\.txt$"

TRANSFER_CALLBACK_TARGET = "xla_python_tpu_callback"
"""The target the race check reads a host callback made of host transfers
as (`Platform.transfer_target`: TPU's)."""

_GPU_MODEL = (
  "XLA:GPU runs a module's thunks in order on one stream by default, but "
  "the order of calls with no data dependency between them is its "
  "scheduler's choice, and concurrent command buffers (CUDA graphs), "
  "stream annotations and async wrappers run such calls at once: there "
  'too, "not ordered" is a race, and the check reports it as on CPU.'
)
"""What the check assumes of a GPU module (docs/finding_races.md, "What
the check can and cannot see", cites XLA's sources)."""

_TPU_MODEL = (
  "on TPU a host callback (io_callback, jax.debug.callback, pure_callback) "
  "is a run of host transfers (send/recv), which the check reads as one "
  "call, declared as on CPU; TPU runs them in the order of the optimized "
  "module's schedule, which keeps no optimization_barrier: the check takes "
  "entangle's barriers from the module before optimization dumped beside "
  "it, where the schedule agrees, and reports any other pair that no data "
  "orders, since that order is the scheduler's choice."
)
"""What the check assumes of a TPU module (docs/platforms.md, "TPU")."""


def _cuda_device(found: re.Match[str]) -> str:
  """CUDA's name of the compute capability XLA writes (``9.0a`` ->
  ``sm_90a``)."""
  return "sm_" + found["capability"].replace(".", "")


def _rocm_device(found: re.Match[str]) -> str:
  """ROCm's architecture name, target features kept (``gfx90a:xnack-``)."""
  return found["device"]


@dataclasses.dataclass(frozen=True)
class Platform:
  """One platform and what each stage needs to know of it."""

  name: str
  """JAX's name of it, as ``mlir.register_lowering`` takes it."""
  jax_names: tuple[str, ...]
  """Every name ``jax.default_backend()`` or a lowering may give it
  (``gpu`` names both GPU makers' platforms)."""
  xla_names: tuple[str, ...]
  """XLA's names of it, lower case (``Host`` for the CPU): what a
  backend's platform becomes through ``xla_client.xla_platform_names``."""
  runtime: str
  """The XLA runtime that runs its modules, as reports name it."""
  kernel: str | None = None
  """The module whose ``lowering`` entangle lowers to here; None where it
  lowers to its FFI custom call (`ffi_name`)."""
  ffi_name: str | None = None
  """The platform name entangle's FFI handler is registered under (JAX
  hands custom-call targets to GPU plugins under ``CUDA`` and ``ROCM``:
  lowercase ``cuda`` would stay queued and never reach a plugin)."""
  callback_device: str | None = None
  """The device word of XLA's host-callback targets here
  (``xla_ffi_python_{word}_callback``); None where a host callback is
  host transfers instead (`transfer_target`)."""
  transfer_target: str | None = None
  """The target the race check reads a host callback made of host
  transfers as (one call, declared as on CPU); None where a host callback
  is a custom call."""
  dump_words: tuple[str, ...] = ()
  """The words a dump file's name ends with for it, before
  ``_after_optimizations.txt`` (``gpu``: XLA:GPU's, either maker), and
  its `name` where its files name no platform (TPU's): what
  ``entangle_jax.testing._findings.platforms.Platform.written`` holds."""
  file_name: re.Pattern[str] | None = None
  """How a dump file's name says it, where no word of `dump_words` does:
  a match's ``written`` group is the name as written (this row's `name`
  where there is none)."""
  vendor: str | None = None
  """Its maker, as reports name a GPU (``CUDA``, ``ROCm``)."""
  device_of: Callable[[re.Match[str]], str] | None = None
  """The device as its maker names it, from a `file_name` match."""
  text_mark: re.Pattern[str] | None = None
  """What a module's text carries only here (TPU's tiled layouts)."""
  model: str | None = None
  """What the race check assumes of its runtime, as a report's note says
  it after ``N modules for ...:``; None where the rules' own runtime
  (XLA:CPU's) is assumed as it is."""
  shown: str | None = None
  """How reports name it when its file names no device; None: as the
  file name writes it."""
  host_side: bool = False
  """Whether its native calls and host callbacks run on the host, in the
  process: the sanitizer's trampolines read their operands there, and
  routes the host callbacks of a one-device module through its calls."""
  execution_op: bool = False
  """Whether the sanitizer's execution op (native/sanitize's
  ``Execution``, which hands a host callback its execution's id) is
  registered for it, under `ffi_name`."""
  one_stream: bool = False
  """Whether a one-device module's executions run one after another,
  each to its end, in one stream (a TPU runs one program at a time;
  XLA:CPU runs executions at once on several threads; a GPU is left out
  until it is measured)."""


CPU = Platform(
  "cpu",
  jax_names=("cpu",),
  xla_names=("host", "cpu"),
  runtime=CPU_RUNTIME,
  ffi_name="cpu",
  callback_device="cpu",
  dump_words=("cpu",),
  host_side=True,
  execution_op=True,
)
CUDA = Platform(
  "cuda",
  jax_names=("cuda", "gpu"),
  xla_names=("cuda",),
  runtime=GPU_RUNTIME,
  ffi_name="CUDA",
  callback_device="gpu",
  dump_words=("gpu",),
  # The compute capability as XLA writes it, major.minor and a feature
  # letter ("9.0a"); CUDA writes it without the dot ("sm_90a").
  file_name=re.compile(
    r"\.(?P<written>sm_(?P<capability>\d[\d.]*[a-z]*)_gpu)" + _SUFFIX
  ),
  vendor="CUDA",
  device_of=_cuda_device,
  model=_GPU_MODEL,
)
ROCM = Platform(
  "rocm",
  jax_names=("rocm", "gpu"),
  xla_names=("rocm",),
  runtime=GPU_RUNTIME,
  ffi_name="ROCM",
  callback_device="gpu",
  # ROCm's architecture name ("gfx942", "gfx90a"), target features
  # (":sramecc+:xnack-") kept as written.
  file_name=re.compile(
    r"\.(?P<written>(?P<device>gfx[0-9a-z]+[^.]*?)_gpu)" + _SUFFIX
  ),
  vendor="ROCm",
  device_of=_rocm_device,
  model=_GPU_MODEL,
)
TPU = Platform(
  "tpu",
  jax_names=("tpu",),
  xla_names=("tpu",),
  runtime=TPU_RUNTIME,
  kernel="entangle_jax._src.tpu_kernel",
  transfer_target=TRANSFER_CALLBACK_TARGET,
  dump_words=("tpu",),
  # A ``cl_NNN`` part that the TPU compiler writes, then
  # ``.after_optimizations.txt``: no platform word.
  file_name=re.compile(r"\.cl_\d+\.after_optimizations\.txt$"),
  text_mark=re.compile(r"\{[\d,]*:T\(\d"),
  model=_TPU_MODEL,
  shown="TPU",
  one_stream=True,
)

PLATFORMS: tuple[Platform, ...] = (CPU, CUDA, ROCM, TPU)
"""Every row; a file name is tried against them in this order."""

RUNTIMES: tuple[str, ...] = tuple(dict.fromkeys(p.runtime for p in PLATFORMS))
"""The runtimes whose model the rules describe, each once."""


def model_of(runtime: str) -> str | None:
  """The model (`Platform.model`) of the platforms `runtime` runs; None
  where they have none."""
  return next((p.model for p in PLATFORMS if p.runtime == runtime), None)


def of_jax_name(name: str) -> Platform | None:
  """The row JAX's platform `name` (``jax.default_backend()``, a
  lowering's platform) names; None for a platform not in the table."""
  return next((p for p in PLATFORMS if name in p.jax_names), None)


def of_xla_name(name: str) -> Platform | None:
  """The row XLA's platform `name` (``Host``, ``CUDA``, ``tpu``; any
  case) names; None for a platform not in the table."""
  lower = name.lower()
  return next((p for p in PLATFORMS if lower in p.xla_names), None)


def of_dump_word(written: str, vendor: str | None = None) -> Platform | None:
  """The row of a platform a dump file's name writes as `written`, made
  by `vendor` where the name says (`of_file_name`); None for a platform
  not in the table."""
  return next(
    (
      p
      for p in PLATFORMS
      if (vendor is not None and p.vendor == vendor) or written in p.dump_words
    ),
    None,
  )


def of_file_name(name: str) -> tuple[Platform, re.Match[str]] | None:
  """The row whose `Platform.file_name` matches dump file `name`, with the
  match; None where none does."""
  for row in PLATFORMS:
    if row.file_name is not None and (found := row.file_name.search(name)):
      return row, found
  return None


def of_text(text: str) -> Platform | None:
  """The row whose `Platform.text_mark` module `text` carries (in its
  ``HloModule`` line, the entry's layout, or its first instructions);
  None where none does."""
  return next(
    (
      p
      for p in PLATFORMS
      if p.text_mark is not None and p.text_mark.search(text, 0, 20000)
    ),
    None,
  )


def host_side(xla_name: str) -> bool:
  """Whether the platform XLA names `xla_name` runs its calls on the host
  (`Platform.host_side`); False for a platform not in the table."""
  row = of_xla_name(xla_name)
  return row is not None and row.host_side


def one_stream(xla_name: str) -> bool:
  """Whether the platform XLA names `xla_name` runs a one-device module's
  executions in one stream (`Platform.one_stream`); False for a platform
  not in the table."""
  row = of_xla_name(xla_name)
  return row is not None and row.one_stream
