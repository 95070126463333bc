"""Bzlmod: the same repositories WORKSPACE mode gets from repositories.bzl."""

load("//tools/bazel:repositories.bzl", "entangle_jax_repositories")

def _entangle_jax_deps_impl(module_ctx):  # @unused
    # Nothing to configure: the pins live in this repository.
    entangle_jax_repositories()

entangle_jax_deps = module_extension(
    implementation = _entangle_jax_deps_impl,
    doc = "The Python env, pinned XLA FFI headers and local CUDA toolkit.",
)
