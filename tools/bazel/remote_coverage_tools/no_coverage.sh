#!/bin/sh
echo "coverage is not supported in entangle-jax's offline Bazel setup" >&2
exit 1
