"""What the tests read of each package under native/."""

def native_package_files(name):
    """Declares what the tests read of a package under native/.

    Its BUILD.bazel, which tests/repository/project_metadata_test.py checks for CC_COPTS
    on every C++ target, and its sources as `:<name>`, which
    tests/repository/native_headers_test.py compiles against the installed jaxlib's FFI
    headers.
    """
    native.exports_files(
        ["BUILD.bazel"],
        visibility = ["//tests:__pkg__"],
    )
    native.filegroup(
        name = name,
        srcs = native.glob([
            "*.cc",
            "*.h",
        ]),
        visibility = ["//tests:__pkg__"],
    )
