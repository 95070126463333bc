"""`py_wheel`: a PEP 427 wheel from a set of files, with nothing but Bazel.

rules_python cannot be fetched offline, so this rule stands in for its
`py_wheel`. Its attributes are a subset of rules_python's (plus `summary` and
`description_file`, which rules_python also has), so a Bzlmod user can switch
the load line to `@rules_python//python:packaging.bzl`.
"""

def _archive_path(file, strip_path_prefixes):
    path = file.short_path
    if path.startswith("../"):
        # A file of an external repository: ../<repo>/<path>.
        path = path.split("/", 2)[2]
    for prefix in strip_path_prefixes:
        if path.startswith(prefix):
            return path[len(prefix):]
    return path

def _only_for_extra(requirement, extra):
    """`requirement` as METADATA lists it for `extra` (PEP 508 marker)."""
    name, semicolon, marker = requirement.partition(";")
    if semicolon:
        return '{}; ({}) and extra == "{}"'.format(name.strip(), marker.strip(), extra)
    return '{}; extra == "{}"'.format(requirement.strip(), extra)

def _py_wheel_impl(ctx):
    name = "{}-{}-{}-{}-{}.whl".format(
        ctx.attr.distribution,
        ctx.attr.version,
        ctx.attr.python_tag,
        ctx.attr.abi,
        ctx.attr.platform,
    )
    wheel = ctx.actions.declare_file(name)
    files = depset(transitive = [d[DefaultInfo].files for d in ctx.attr.deps])
    args = ctx.actions.args()
    args.add("--output", wheel)
    args.add("--distribution", ctx.attr.distribution)
    args.add("--version", ctx.attr.version)
    args.add("--tag", "{}-{}-{}".format(ctx.attr.python_tag, ctx.attr.abi, ctx.attr.platform))
    args.add("--summary", ctx.attr.summary)
    args.add("--python-requires", ctx.attr.python_requires)
    args.add_all(ctx.attr.requires, before_each = "--requires")
    for extra, requires in sorted(ctx.attr.extra_requires.items()):
        args.add("--provides-extra", extra)
        for requirement in requires:
            args.add("--requires", _only_for_extra(requirement, extra))
    for group, points in sorted(ctx.attr.entry_points.items()):
        for point in points:
            args.add("--entry-point", "{}:{}".format(group, point))
    if ctx.attr.license:
        args.add("--license", ctx.attr.license)
    for f in ctx.files.license_files:
        # PEP 639 keeps each licence file under its source-tree path.
        args.add("--license-file", "{}={}".format(_archive_path(f, []), f.path))
    inputs = [files, depset(ctx.files.license_files)]
    if ctx.file.description_file:
        args.add("--description-file", ctx.file.description_file)
        inputs.append(depset([ctx.file.description_file]))
    for f in files.to_list():
        args.add("--file", "{}={}".format(_archive_path(f, ctx.attr.strip_path_prefixes), f.path))
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = depset(transitive = inputs),
        outputs = [wheel],
        mnemonic = "PyWheel",
        progress_message = "Building wheel " + name,
    )
    return [DefaultInfo(files = depset([wheel]))]

py_wheel = rule(
    implementation = _py_wheel_impl,
    attrs = {
        "abi": attr.string(default = "none"),
        "deps": attr.label_list(doc = "Targets whose files go into the wheel."),
        "description_file": attr.label(allow_single_file = True),
        "distribution": attr.string(mandatory = True),
        "entry_points": attr.string_list_dict(doc = "Entry points of each group, as `name = module:object`."),
        "extra_requires": attr.string_list_dict(doc = "Requirements of each extra."),
        "license": attr.string(doc = "The licence as an SPDX expression (PEP 639's License-Expression)."),
        "license_files": attr.label_list(
            allow_files = True,
            doc = "Files written to .dist-info/licenses/ (PEP 639), under their source-tree paths.",
        ),
        "platform": attr.string(default = "any"),
        "python_requires": attr.string(),
        "python_tag": attr.string(default = "py3"),
        "requires": attr.string_list(),
        "strip_path_prefixes": attr.string_list(),
        "summary": attr.string(),
        "version": attr.string(mandatory = True),
        "_builder": attr.label(
            default = "//tools/bazel:build_wheel",
            executable = True,
            cfg = "exec",
        ),
    },
    doc = "Builds a wheel (PEP 427) holding the files of `deps`.",
)
