"""Serves rules_cc's `cc_common` load path with Bazel 4's built-in."""

load(":builtins.bzl", "builtin_cc_common")

cc_common = builtin_cc_common
