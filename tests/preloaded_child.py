"""Child Pythons forked from one that has already imported jax and pytest.

Many tests run a small program or a pytest run in a child interpreter
(the pytest plugin's, the sanitizer's and the ranks' checks set XLA's
flags before the backend starts, and that takes a process of its own).
Most of such a child's cost is importing jax (about 1.3 of its 1.7 CPU
seconds on Python 3.11, measured on the suite's small racy project), and
the suite starts some hundred of them in each CI lane. So `run` asks a
server, a Python started once a test process that has imported jax,
numpy and pytest (`serve`), to fork the child instead. Importing jax starts no
backend: XLA reads ``XLA_FLAGS`` when the first backend starts, which is
in the child (`PreloadedChildTest` checks both).

A forked child differs from a fresh one in what the server imported at
its start. So `run` forks only where the request's environment agrees
with the server's in every variable an import may read (`_READ_AT_IMPORT`:
jax's and XLA's, TensorFlow's logging, Python's own, the dynamic
loader's); any other request, and every caller that checks what a fresh
interpreter imports or registers, gets ``subprocess.run`` of a fresh one.
The child applies the rest of the environment, the folder, ``sys.argv``
and ``sys.path`` as a fresh interpreter would have them, and exits as one
does: non-daemon threads joined, ``atexit`` handlers run, streams flushed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

_PRELOAD = ("jax", "jax.numpy", "numpy", "pytest")

# Environment variables read when the preloaded modules are imported (or
# when the interpreter starts): a request that sets any of them otherwise
# than the server had them gets a fresh interpreter.
_READ_AT_IMPORT = ("JAX_", "TF_", "PYTHON", "LD_", "MALLOC", "OMP_", "OPENBLAS")

# Set (in the environment of the tests, or of one request) to switch the
# server off: every child a fresh interpreter, to compare the two.
OFF = "ENTANGLE_JAX_TESTS_FRESH_CHILDREN"

_lock = threading.Lock()
_server: dict = {}


def _import_time_env(env: dict[str, str]) -> dict[str, str]:
  return {
    k: v
    for k, v in env.items()
    if k.startswith(_READ_AT_IMPORT) and k != "PYTHONPATH"
  }


def _started() -> subprocess.Popen | None:
  """The server, started if none was (with this process's environment,
  its ``sys.path`` as ``PYTHONPATH``); None once it failed to start or
  has ended."""
  if "process" not in _server:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen(
      [sys.executable, "-c", f"from {__name__} import serve; serve()"],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      env=env,
      bufsize=0,
    )
    ready = _line(process, None) == "ready"
    _server["process"] = process if ready else None
    _server["env"] = _import_time_env(env)
    atexit.register(_stop)
  process = _server["process"]
  if process is not None and process.poll() is not None:
    _close(process)
    _server["process"] = process = None
  return process


def _line(process: subprocess.Popen, timeout: float | None) -> str | None:
  """The server's next line, or None where none came within `timeout`
  seconds (None: no limit) or it ended. Read a byte at a time from the
  pipe itself: a buffered reader could hold the next line where
  ``select`` does not see it."""
  assert process.stdout is not None
  fd = process.stdout.fileno()
  deadline = None if timeout is None else time.monotonic() + timeout
  text = b""
  while not text.endswith(b"\n"):
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not select.select([fd], [], [], left)[0]:
      return None
    byte = os.read(fd, 1)
    if not byte:
      return None
    text += byte
  return text.decode().strip()


def _stop() -> None:
  process = _server.get("process")
  if process is not None:
    _close(process)


def _close(process: subprocess.Popen) -> None:
  """Ends the server (at the end of its stdin) and closes its pipes."""
  for pipe in (process.stdin, process.stdout):
    if pipe is not None:
      pipe.close()
  process.wait()


def forkable(env: dict[str, str]) -> bool:
  """Whether a child with environment `env` can be forked from the
  server (started now if none was)."""
  if os.environ.get(OFF) or env.get(OFF):
    return False
  if _started() is None:
    return False
  return _import_time_env(env) == _server["env"]


def run(
  argv: list[str],
  *,
  env: dict[str, str],
  cwd: str | os.PathLike | None = None,
  timeout: float,
  fresh: bool = False,
) -> subprocess.CompletedProcess:
  """``subprocess.run([sys.executable, *argv], capture_output=True,
  text=True, ...)``, forked from the preloaded server where `forkable`
  and not `fresh` (a test of what importing does asks for a fresh
  interpreter): `argv` is ``-m MODULE ...``, ``-c SOURCE ...`` or
  ``SCRIPT ...``. Raises ``subprocess.TimeoutExpired`` after `timeout`
  seconds, the child killed, as ``subprocess.run`` does."""
  command = [sys.executable, *argv]
  with _lock:
    if fresh or not forkable(env):
      return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
      )
    process = _server["process"]
    with tempfile.TemporaryDirectory() as streams:
      out = os.path.join(streams, "out")
      err = os.path.join(streams, "err")
      request = {
        "argv": list(argv),
        "env": dict(env),
        "cwd": str(cwd if cwd is not None else os.getcwd()),
        "out": out,
        "err": err,
      }
      process.stdin.write(json.dumps(request).encode() + b"\n")
      pid = int(_line(process, None) or "0")
      if not pid:
        raise RuntimeError("the preloaded child server ended")
      code = _line(process, timeout)
      if code is None:
        os.kill(pid, signal.SIGKILL)
        _line(process, None)
        raise subprocess.TimeoutExpired(
          command, timeout, _read(out), _read(err)
        )
      return subprocess.CompletedProcess(
        command, int(code), _read(out), _read(err)
      )


def _read(path: str) -> str:
  try:
    return pathlib.Path(path).read_text(errors="replace")
  except FileNotFoundError:
    return ""


def serve() -> None:
  """The server: imports `_PRELOAD`, says "ready", then for each request
  line on stdin forks a child (`_child`), writes its pid and, once it
  ended, its exit code (negative: the signal that ended it) on stdout.
  Ends at the end of stdin."""
  for name in _PRELOAD:
    __import__(name)
  print("ready", flush=True)
  for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      _child(**request)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)


def _child(argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
  """The forked child: becomes ``python *argv`` run in `cwd` with `env`,
  its output in the files `out` and `err`, and exits with its code."""
  for fd, path, flags in (
    (0, os.devnull, os.O_RDONLY),
    (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
  ):
    opened = os.open(path, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)
  os.chdir(cwd)
  os.environ.clear()
  os.environ.update(env)
  extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  first, rest = argv[0], argv[1:]
  if first in ("-m", "-c"):
    sys.argv, start = [first, *rest[1:]], ""
  else:
    sys.argv = [first, *rest]
    start = os.path.dirname(os.path.abspath(first))
  sys.path[:] = [start, *extra] + [p for p in sys.path if p not in extra]
  code = 0
  try:
    if first == "-m":
      runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    elif first == "-c":
      main = types.ModuleType("__main__")
      sys.modules["__main__"] = main
      exec(compile(rest[0], "<string>", "exec"), main.__dict__)
    else:
      runpy.run_path(first, run_name="__main__")
  except SystemExit as e:
    code = _exit_code(e.code)
  except BaseException:
    traceback.print_exc()
    code = 1
  for thread in threading.enumerate():
    if thread is not threading.main_thread() and not thread.daemon:
      thread.join()
  atexit._run_exitfuncs()
  for stream in (sys.stdout, sys.stderr):
    with contextlib.suppress(Exception):
      stream.flush()
  os._exit(code)


def _exit_code(code) -> int:
  """The exit status ``raise SystemExit(code)`` gives a fresh
  interpreter."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  print(code, file=sys.stderr)
  return 1
