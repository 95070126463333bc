"""Helpers of tests/BUILD.bazel: a test file's target name, a folder's
files for its suite (folder_suite.py), and a list of labels each once."""

def name_of(src):
    """The target name of test file `src`: its file name alone."""
    return src.split("/")[-1][:-len(".py")]

def suite_files(srcs, folder, own):
    """The files of `srcs` in `folder` whose names are not in `own`."""
    return [
        src
        for src in srcs
        if src.split("/")[0] == folder and name_of(src) not in own
    ]

def module_names(srcs):
    """The dotted module names of `srcs` (``tests.order.rule_table_test``)."""
    return ",".join([
        "tests." + src[:-len(".py")].replace("/", ".")
        for src in srcs
    ])

def each_once(labels):
    """`labels` in order, each once (an attribute must not repeat one)."""
    return {label: None for label in labels}.keys()
