"""The one Python interpreter entangle_jax's repository rules run.

The setup names it once (`entangle_jax_repositories(python_interpreter = ...)`
or `python_interpreter_target = <label of the interpreter file>`). A bare name
such as "python3" is looked up on PATH when a repository is first fetched;
PATH is deliberately not tracked, so a later change of PATH reinstalls
nothing. `$ENTANGLE_JAX_PYTHON`, when set, overrides the setup (and is
tracked: changing it refetches).
"""

INTERPRETER_ATTRS = {
    "python_interpreter": attr.string(
        default = "python3",
        doc = "An interpreter's absolute path, or a name looked up on PATH once.",
    ),
    "python_interpreter_target": attr.label(
        allow_single_file = True,
        doc = "The interpreter as a file label; wins over python_interpreter.",
    ),
}

INTERPRETER_ENVIRON = ["ENTANGLE_JAX_PYTHON"]

def resolve_interpreter(ctx):
    """The interpreter that the setup named.

    Args:
      ctx: the repository_ctx of a rule with INTERPRETER_ATTRS.

    Returns:
      The interpreter's path (as given or found; not resolved further).
    """
    override = ctx.os.environ.get("ENTANGLE_JAX_PYTHON")
    if override:
        return ctx.path(override)
    if ctx.attr.python_interpreter_target:
        return ctx.path(ctx.attr.python_interpreter_target)
    name = ctx.attr.python_interpreter
    if "/" in name:
        return ctx.path(name)
    found = ctx.which(name)
    if not found:
        fail("{}: no {} on PATH; name the interpreter with python_interpreter or $ENTANGLE_JAX_PYTHON".format(ctx.name, name))
    return found

# Scratch space for pip inside the repository directory, deleted after use.
PIP_SCRATCH = "_pip_scratch"

def pip_environment(ctx):
    """Environment for running pip so that it writes only into `ctx`'s directory.

    pip's own caches are off. pip also runs `rustc --version` for its user
    agent, and where rustc is a rustup proxy that writes ~/.rustup; RUSTUP_HOME
    points it into PIP_SCRATCH instead, which the caller deletes.

    Args:
      ctx: a repository_ctx.

    Returns:
      A dict for repository_ctx.execute's `environment`.
    """
    return {
        "PIP_NO_CACHE_DIR": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
        "PYTHONDONTWRITEBYTECODE": "1",
        "RUSTUP_HOME": str(ctx.path(PIP_SCRATCH + "/rustup")),
    }

def fail_on(ctx, result, what):
    """Fails the fetch of `ctx`'s repository when `result` is an error."""
    if result.return_code != 0:
        fail("{}: {} failed:\n{}\n{}".format(ctx.name, what, result.stdout, result.stderr))
