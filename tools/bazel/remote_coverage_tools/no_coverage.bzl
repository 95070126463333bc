"""An executable that says coverage is unsupported, needing no shell rules."""

def _no_coverage_tool_impl(ctx):
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.expand_template(
        template = ctx.file._script,
        output = script,
        substitutions = {},
        is_executable = True,
    )
    return [DefaultInfo(executable = script)]

no_coverage_tool = rule(
    implementation = _no_coverage_tool_impl,
    attrs = {"_script": attr.label(default = ":no_coverage.sh", allow_single_file = True)},
    executable = True,
    doc = "A tool that fails, saying coverage is not supported offline.",
)
