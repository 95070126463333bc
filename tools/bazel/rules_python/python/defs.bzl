"""Forwards the Python rules that entangle_jax loads to Bazel 4's built-ins.

Serves `@rules_python//python:defs.bzl` offline. Only the symbols that
entangle_jax's BUILD files and repository rules load are here.
"""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

def py_binary(**attrs):
    native.py_binary(**attrs)

def py_library(**attrs):
    native.py_library(**attrs)

def py_runtime(**attrs):
    native.py_runtime(**attrs)

def py_test(**attrs):
    native.py_test(**attrs)

py_runtime_pair = _py_runtime_pair
