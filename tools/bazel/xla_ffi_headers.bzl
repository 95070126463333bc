"""The XLA FFI headers of the pinned jaxlib, verified against their sha256.

Runs tools/xla_ffi_headers.py, the same tool the meson build uses, so the pin
in tools/xla_ffi_pin.json is the one source of truth. The headers come from
an installed jaxlib of exactly the pinned version or from that jaxlib's wheel
fetched with `python -m pip download` (the user's pip configuration applies);
a header whose sha256 differs from the pin fails the fetch, naming the file
and both hashes. Exposes //:xla_ffi (a cc_library).
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

exports_files(glob(["xla/ffi/api/*.h"]))

cc_library(
    name = "xla_ffi",
    hdrs = glob(["xla/ffi/api/*.h"]),
    includes = ["."],
)
"""

def _xla_ffi_headers_impl(ctx):
    python = ctx.os.environ.get("ENTANGLE_JAX_PYTHON") or ctx.which("python3")
    if not python:
        fail("xla_ffi_headers: no python3 on PATH; set ENTANGLE_JAX_PYTHON")

    # Reading the pin through its label makes the fetch rerun when it changes.
    ctx.path(ctx.attr.pin)
    result = ctx.execute(
        [python, ctx.path(ctx.attr.tool), "fetch", str(ctx.path("."))],
        timeout = 900,
    )
    if result.return_code != 0:
        fail("xla_ffi_headers: {}{}".format(result.stdout, result.stderr))
    ctx.file("BUILD.bazel", _BUILD)
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))

xla_ffi_headers = repository_rule(
    implementation = _xla_ffi_headers_impl,
    attrs = {
        "pin": attr.label(default = "//tools:xla_ffi_pin.json", allow_single_file = True),
        "tool": attr.label(default = "//tools:xla_ffi_headers.py", allow_single_file = True),
    },
    environ = [
        "ENTANGLE_JAX_PYTHON",
        "ENTANGLE_JAX_CACHE",
        "ENTANGLE_JAX_FFI_HEADERS",
        "PATH",
    ],
    doc = "Pinned, checksummed XLA FFI headers from the pinned jaxlib.",
)
