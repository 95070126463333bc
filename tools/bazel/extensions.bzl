"""Bzlmod: the same repositories WORKSPACE mode gets from repositories.bzl.

The root module may pass its own labels with one `configure` tag, e.g.

    deps = use_extension("@entangle_jax//tools/bazel:extensions.bzl", "entangle_jax_deps")
    deps.configure(jax = "@pypi//jax", xla_ffi = "@xla//xla/ffi/api:ffi")

Labels are resolved in the root module, so its repository names apply.
"""

load(":repositories.bzl", "entangle_jax_repositories")

_configure = tag_class(attrs = {
    "extra_packages": attr.string_list(),
    "jax": attr.label(),
    "pybind11": attr.label(),
    "python_headers": attr.label(),
    "python_interpreter": attr.string(default = "python3"),
    "python_interpreter_target": attr.label(),
    "xla_ffi": attr.label(),
})

def _label(value):
    return str(value) if value else None

def _entangle_jax_deps_impl(module_ctx):
    tags = [t for m in module_ctx.modules if m.is_root for t in m.tags.configure]
    if len(tags) > 1:
        fail("entangle_jax_deps: at most one configure tag, got {}".format(len(tags)))
    tag = tags[0] if tags else None
    entangle_jax_repositories(
        jax = _label(tag.jax) if tag else None,
        pybind11 = _label(tag.pybind11) if tag else None,
        python_headers = _label(tag.python_headers) if tag else None,
        python_interpreter = tag.python_interpreter if tag else "python3",
        python_interpreter_target = _label(tag.python_interpreter_target) if tag else None,
        xla_ffi = _label(tag.xla_ffi) if tag else None,
        extra_packages = tag.extra_packages if tag else [],
    )

entangle_jax_deps = module_extension(
    implementation = _entangle_jax_deps_impl,
    tag_classes = {"configure": _configure},
    doc = "entangle_jax's Python env, XLA FFI headers, CUDA toolkit and config.",
)
