"""Serves rules_cc's `CcInfo` load path with Bazel 4's built-in."""

load(":builtins.bzl", "builtin_cc_info")

CcInfo = builtin_cc_info
