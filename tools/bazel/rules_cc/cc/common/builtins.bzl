"""Bazel 4's built-in cc_common and CcInfo under other names.

A .bzl file cannot bind a global to a built-in of the same name, so
cc_common.bzl and cc_info.bzl re-export these.
"""

builtin_cc_common = cc_common
builtin_cc_info = CcInfo
