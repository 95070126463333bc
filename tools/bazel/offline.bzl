"""Local stand-ins for what Debian's Bazel 4.2.3 would otherwise download.

Bazel's built-in WORKSPACE suffix asks for rules_cc, rules_java and
remote_coverage_tools, none of which can be fetched offline, and the BUILD
files load their rules from rules_cc and rules_python. Declaring these first,
as local repositories, satisfies both: rules_cc, rules_python and
remote_coverage_tools from tools/bazel/ (ours, forwarding to the rules built
into Bazel 4), rules_java from Debian's bazel-rules-java package.

In entangle_jax's own WORKSPACE the call comes first. In a workspace that
uses entangle_jax, it comes right after the `local_repository` that declares
@entangle_jax (this file is loaded from there) and before anything that
loads from rules_cc or rules_python, repositories.bzl included.
`entangle_jax_path` is the entangle_jax checkout's directory: the `path`
given to that `local_repository`, relative to the workspace's root, or
absolute. With a Bazel that can download, declare the real rules_cc and
rules_python instead.
"""

# buildifier: disable=unnamed-macro (a WORKSPACE setup function, like *_repositories)
def entangle_jax_offline_bazel(entangle_jax_path = "."):
    native.local_repository(
        name = "rules_cc",
        path = entangle_jax_path + "/tools/bazel/rules_cc",
    )
    native.local_repository(
        name = "rules_python",
        path = entangle_jax_path + "/tools/bazel/rules_python",
    )
    native.local_repository(
        name = "remote_coverage_tools",
        path = entangle_jax_path + "/tools/bazel/remote_coverage_tools",
    )
    native.local_repository(
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
