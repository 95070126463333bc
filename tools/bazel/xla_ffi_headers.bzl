"""The XLA FFI headers of the pinned jaxlib, verified against their sha256.

Runs tools/xla_ffi_headers.py, the same tool the meson build uses, so the pin
in tools/xla_ffi_pin.json is the one source of truth. The headers come from
`$ENTANGLE_JAX_FFI_HEADERS`, an installed jaxlib of exactly the pinned
version, or that jaxlib's wheel fetched with `python -m pip download` (the
user's pip configuration applies); a header whose sha256 differs from the pin
fails the fetch, naming the file and both hashes. The wheel is downloaded
into this repository's directory (pip's cache off) and deleted afterwards,
so the fetch writes nothing elsewhere, `~/.cache/entangle-jax` included.
Exposes //:xla_ffi (a cc_library).
"""

load(":interpreter.bzl", "INTERPRETER_ATTRS", "INTERPRETER_ENVIRON", "PIP_SCRATCH", "fail_on", "pip_environment", "resolve_interpreter")

_BUILD = """
load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "xla_ffi",
    hdrs = glob(["xla/ffi/api/*.h"]),
    includes = ["."],
)
"""

_DOWNLOADS = "_downloads"

def _xla_ffi_headers_impl(ctx):
    python = resolve_interpreter(ctx)

    # Reading the pin through its label makes the fetch rerun when it changes.
    ctx.path(ctx.attr.pin)
    result = ctx.execute(
        [python, ctx.path(ctx.attr.tool), "fetch", str(ctx.path("."))],
        environment = dict(
            pip_environment(ctx),
            ENTANGLE_JAX_CACHE = str(ctx.path(_DOWNLOADS)),
        ),
        timeout = 900,
    )
    fail_on(ctx, result, "fetching the XLA FFI headers")
    ctx.delete(_DOWNLOADS)
    ctx.delete(PIP_SCRATCH)
    ctx.file("BUILD.bazel", _BUILD)
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

xla_ffi_headers = repository_rule(
    implementation = _xla_ffi_headers_impl,
    attrs = dict(INTERPRETER_ATTRS, **{
        "pin": attr.label(default = "//tools:xla_ffi_pin.json", allow_single_file = True),
        "tool": attr.label(default = "//tools:xla_ffi_headers.py", allow_single_file = True),
    }),
    environ = INTERPRETER_ENVIRON + ["ENTANGLE_JAX_FFI_HEADERS"],
    doc = "Pinned, checksummed XLA FFI headers from the pinned jaxlib.",
)
