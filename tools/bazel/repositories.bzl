"""The external repositories entangle_jax's BUILD files need.

Call `entangle_jax_repositories()` from a WORKSPACE (this one, or a downstream
project's, after a `local_repository`/`http_archive` named "entangle_jax"),
then `register_toolchains("@entangle_jax_python//:toolchain")`.
"""

load("//tools/bazel:cuda.bzl", "cuda_toolkit")
load("//tools/bazel:python_env.bzl", "python_env")
load("//tools/bazel:xla_ffi_headers.bzl", "xla_ffi_headers")

# buildifier: disable=unnamed-macro (a WORKSPACE setup function, like *_repositories)
def entangle_jax_repositories():
    python_env(
        name = "entangle_jax_python",
        pyproject = "@entangle_jax//:pyproject.toml",
        requirements = "@entangle_jax//:requirements.lock",
    )
    xla_ffi_headers(
        name = "entangle_jax_xla_ffi",
        pin = "@entangle_jax//tools:xla_ffi_pin.json",
        tool = "@entangle_jax//tools:xla_ffi_headers.py",
    )
    cuda_toolkit(name = "entangle_jax_cuda")
