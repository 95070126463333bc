"""The custom calls that are JAX's, jaxlib's or XLA's own kernels and
markers: one table, each entry with the reason it touches no native state.

``races`` and ``order_graph`` skip these by default (`is_library_target`):
they compute their results from their operand buffers alone, or only tell
the compiler something, so no other call can observe when they run. A
target matches an entry when it equals an exact entry, or starts with a
prefix entry. ``docs/proving_order.md`` shows the table
(`markdown`; ``tools/rule_docs.py`` writes it there, and
``tests/targets/library_kernels_test.py`` compiles each CPU kernel and
checks the page).
"""

from __future__ import annotations

import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class LibraryKernel:
  """One entry: a target name (or prefix), where JAX emits it, and why it
  is not a native call."""

  pattern: str
  prefix: bool
  platform: str
  """``cpu``, ``gpu``, ``tpu`` or ``any``: where JAX or XLA emits it."""
  reason: str


def _exact(pattern: str, platform: str, reason: str) -> LibraryKernel:
  return LibraryKernel(pattern, False, platform, reason)


def _prefix(pattern: str, platform: str, reason: str) -> LibraryKernel:
  return LibraryKernel(pattern, True, platform, reason)


_MARKER = "a marker for the partitioner or the compiler; runs no kernel"
_PURE = "computes its results from its operand buffers alone"

KERNELS: tuple[LibraryKernel, ...] = (
  # Markers that XLA's passes consume or turn into copies.
  _exact("Sharding", "any", _MARKER + " (jax.lax.with_sharding_constraint)"),
  _exact("SPMDFullToShardShape", "any", _MARKER + " (shard_map's entry)"),
  _exact("SPMDShardToFullShape", "any", _MARKER + " (shard_map's exit)"),
  _exact("MoveToHost", "any", _MARKER + " (memory kinds: a copy to host)"),
  _exact("MoveToDevice", "any", _MARKER + " (memory kinds: a copy back)"),
  _exact("annotate_device_placement", "any", _MARKER + " (memory kinds)"),
  _exact("LayoutConstraint", "any", _MARKER + " (a layout request)"),
  _exact("X64Combine", "tpu", _MARKER + " (64-bit emulation)"),
  _exact("X64SplitLow", "tpu", _MARKER + " (64-bit emulation)"),
  _exact("X64SplitHigh", "tpu", _MARKER + " (64-bit emulation)"),
  # XLA's own kernels.
  _exact("TopK", "cpu", _PURE + " (jax.lax.top_k, jax.lax.approx_max_k)"),
  _exact(
    "ApproxTopK",
    "any",
    _PURE + " (jax.lax.approx_max_k as JAX lowers it; XLA:CPU makes it TopK)",
  ),
  # XLA:TPU's linear algebra, as jax 0.10.2's TPU lowerings call it.
  _exact("LuDecomposition", "tpu", _PURE + " (jax.lax.linalg.lu, inv)"),
  _exact("Eigh", "tpu", _PURE + " (jax.lax.linalg.eigh, svd)"),
  _exact("Qr", "tpu", _PURE + " (jax.lax.linalg.qr)"),
  _exact(
    "ProductOfElementaryHouseholderReflectors",
    "tpu",
    _PURE + " (jax.lax.linalg.householder_product, qr)",
  ),
  _prefix("__cublas$", "gpu", _PURE + " (XLA:GPU's GEMMs)"),
  _prefix("__cudnn$", "gpu", _PURE + " (XLA:GPU's convolutions, attention)"),
  _prefix("__gpu$", "gpu", _PURE + " (XLA:GPU's own custom calls)"),
  _prefix("__onednn$", "cpu", _PURE + " (XLA:CPU's oneDNN rewrites)"),
  _prefix("xla.", "any", _PURE + " (XLA's built-in FFI handlers)"),
  # jaxlib's kernels: linear algebra, FFT, sparse, RNN, random bits.
  _prefix("lapack_", "cpu", _PURE + " (jnp.linalg, jax.lax.linalg)"),
  _prefix("ducc_", "cpu", _PURE + " (jnp.fft, older jaxlib)"),
  _prefix("dynamic_ducc_", "cpu", _PURE + " (jnp.fft, older jaxlib)"),
  _exact(
    "cpu_csr_sparse_dense_ffi",
    "cpu",
    _PURE + " (jax.experimental.sparse: BCSR @ dense)",
  ),
  _prefix("cusolver", "gpu", _PURE + " (jax.lax.linalg on CUDA)"),
  _prefix("cublas", "gpu", _PURE + " (jaxlib's batched LU, QR on CUDA)"),
  _prefix("cusparse", "gpu", _PURE + " (jax.experimental.sparse on CUDA)"),
  _prefix("cu_", "gpu", _PURE + " (jaxlib's CUDA kernels: threefry, LU)"),
  _exact("cudnn_rnn_ffi", "gpu", _PURE + " (jax.experimental.rnn on CUDA)"),
  _exact("cudnn_rnn_bwd_ffi", "gpu", _PURE + " (its backward pass)"),
  _prefix("hipsolver", "gpu", _PURE + " (jax.lax.linalg on ROCm)"),
  _prefix("hipblas", "gpu", _PURE + " (jaxlib's batched LU, QR on ROCm)"),
  _prefix("hipsparse", "gpu", _PURE + " (jax.experimental.sparse on ROCm)"),
  _prefix("hip_", "gpu", _PURE + " (jaxlib's ROCm kernels)"),
  # Kernels compiled from JAX code: pure functions of their buffers.
  _prefix("__triton", "gpu", _PURE + " (XLA:GPU's Triton fusions)"),
  _exact("triton_kernel_call", "gpu", _PURE + " (Pallas on GPU, Triton)"),
  _exact("triton_kernel_call_ffi", "gpu", _PURE + " (Pallas on GPU, Triton)"),
  _prefix("mosaic_gpu", "gpu", _PURE + " (Pallas on GPU, Mosaic)"),
  _exact("tpu_custom_call", "tpu", _PURE + " (Pallas on TPU, Mosaic)"),
)
"""Every library kernel and marker, exact names and prefixes together."""

EXACT = frozenset(k.pattern for k in KERNELS if not k.prefix)
PREFIXES = tuple(k.pattern for k in KERNELS if k.prefix)


@functools.lru_cache(maxsize=4096)
def is_library_target(target: str) -> bool:
  """Whether `target` is one of JAX's or XLA's own kernels or markers."""
  return target in EXACT or target.startswith(PREFIXES)


def entry_for(target: str) -> LibraryKernel | None:
  """The entry `target` matches, or None for a target not in the table."""
  for kernel in KERNELS:
    if target == kernel.pattern or (
      kernel.prefix and target.startswith(kernel.pattern)
    ):
      return kernel
  return None


def markdown() -> str:
  """The table as a Markdown table, for ``docs/proving_order.md``."""
  lines = [
    "| Target | Platform | Why it is not a native call |",
    "|---|---|---|",
  ]
  for k in KERNELS:
    name = f"`{k.pattern}`" + (" (prefix)" if k.prefix else "")
    lines.append(f"| {name} | {k.platform} | {k.reason} |")
  return "\n".join(lines) + "\n"
