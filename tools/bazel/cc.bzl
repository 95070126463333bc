"""The compiler flags every C++ target of entangle_jax carries.

The sources, and the XLA FFI headers they include (std::string_view,
std::is_invocable_r_v), are C++17. The flag is on the targets rather than in
.bazelrc because Bazel reads only the main workspace's .bazelrc: a project
that uses entangle_jax as an external repository would otherwise compile
them with its own toolchain's default, which for Bazel 4's autodetected gcc
is -std=c++0x. The nvcc rule (cuda.bzl) uses the same flag.
"""

CC_COPTS = ["-std=c++17"]
