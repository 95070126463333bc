"""Each wrapped call's place in its program.

Inside a ``sanitize()`` block, every module JAX compiles passes through
`annotate` first, on a copy (JAX's own module stays as the program made
it): each custom call to a wrapped target gets one more FFI attribute,
``entangle_jax_sanitize_site = N`` (an int64, unique in the process),
which the trampoline reads and strips before the original
handler sees the call. `CallSite` says where ``N`` is: its module, and its
position among the module's native calls in program order (the order the
program made them: the lowered module's, callees in place of their calls).

A private function called from several places is copied once per call
(XLA inlines them anyway), so each call site has a place of its own. Two
calls that were identical (XLA would merge them, as common
subexpressions) differ by their site, so while sanitizing XLA keeps both.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from typing import Any

from entangle_jax._src import access_policy
from entangle_jax._src.targets import platforms
from entangle_jax._src.targets.library_kernels import is_library_target
from entangle_jax._src.targets.names import (
  ENTANGLE_TARGET,
  TPU_HOST_CALLBACK_TARGET,
  is_host_callback,
)
from entangle_jax.testing._sanitize import (
  callbacks,
  jax_hooks,
  mlir_reading,
  module_edits,
  trip_counts,
  user_modules,
  wrapping,
)
from entangle_jax.testing._sanitize.module_edits import SITE_ATTRIBUTE

_LOOPS = ("stablehlo.while",)
_BRANCHES = ("stablehlo.case", "stablehlo.if")
LOOP = "loop"
BRANCH = "branch"


@dataclasses.dataclass(frozen=True)
class Frame:
  """One construct a call is inside: a region of a loop or a branch.

  Attributes:
    kind: `LOOP` (a region of a ``while``: its condition or its body) or
      `BRANCH` (one branch of a ``case``/``if``).
    construct: the construct's number, unique in its module.
    region: which of its regions (a ``while``: 0 the condition, 1 the
      body; a ``case``: the branch's index).
  """

  kind: str
  construct: int
  region: int


@dataclasses.dataclass(eq=False)
class SanitizedModule:
  """A module compiled while the sanitizer ran."""

  name: str
  serial: int
  platform: str
  sites: list[CallSite] = dataclasses.field(default_factory=list)
  not_observed: set[str] = dataclasses.field(default_factory=set)
  """The targets it calls that run unwrapped, which are typed FFI targets
  registered before the sanitizer started and targets of the untyped
  custom-call API (entangle's no-op and JAX's library kernels, which
  compute from their buffers alone, are not listed)."""
  callbacks: dict[int, CallSite] = dataclasses.field(default_factory=dict)
  """Its host callbacks' places, by their index in the callbacks XLA is
  given with the module."""
  transfer_callbacks: list[tuple[Frame, ...]] = dataclasses.field(
    default_factory=list
  )
  """Its host callbacks made of host transfers (TPU), in program order:
  the loops and branches each is in."""
  executable: Any = None
  one_device: bool = False
  """It runs on one device (one partition, one replica)."""
  executions: bool = False
  """Its host callbacks' custom calls each take two more operands
  (`route_executions`): XLA's id of the execution, from an execution op
  the sanitizer added, and the call's site number, which their recorders
  read (`callbacks.execution_recorder`)."""
  anchor: CallSite | None = None
  """A host callback the sanitizer added (`ANCHOR`), outside every loop
  and branch, whose calls count the module's executions: added where the
  module's own host callbacks are all in loops or branches."""

  loop_trips: dict[int, int] = dataclasses.field(default_factory=dict)
  """The trip count of each of its loops (by `Frame.construct`) whose
  program states it (`trip_counts`): what pairs the calls of an inner loop
  by iteration where no iteration marker counts them."""

  iteration_markers: dict[int, int] = dataclasses.field(default_factory=dict)
  """The site numbers of its iteration markers (`_Walker.mark_iterations`),
  each with the number of the loop (`Frame.construct`) whose condition it
  is at the top of."""

  program: bytes | None = None
  """The module as the sanitizer handed it to XLA (MLIR bytecode, its
  places in it), for the static check's comparison of the program with
  what XLA made of it (`program_text`)."""

  def program_text(self) -> str | None:
    """The HLO text of the module before optimization (with each op's
    scope and Python stack, as ``Lowered.as_text(dialect="hlo",
    debug_info=True)`` prints it); None where this JAX cannot make it."""
    if self.program is None:
      return None
    try:
      return jax_hooks.hlo_text(self.program)
    except Exception:
      return None

  def text(self) -> str | None:
    """The optimized HLO text, while the executable is alive."""
    executable = self.executable() if self.executable is not None else None
    if executable is None:
      return None
    try:
      return executable.hlo_modules()[0].to_string()
    except Exception:
      return None

  def __str__(self) -> str:
    return f"{self.name} (compile {self.serial})"


@dataclasses.dataclass(frozen=True, eq=False)
class CallSite:
  """Where a call is in its program.

  Attributes:
    number: the attribute's value.
    module: the module.
    position: the call's place among the module's native calls, in
      program order (0 first).
    target: the target called.
    in_loop: the call is in a loop body (it may run many times in one
      execution).
    in_branch: the call is in a branch (it may not run at all).
    host_callback: for a host callback, its Python callable's name
      (`callbacks.function_name`: a qualified name, a lambda's with its
      file:line, a callable object's class, a ``jax.debug.print``'s
      format string; ``"?"`` where none was found); None for a native
      call.
    context: the loops and branches the call is inside, outermost first
      (`Frame`): which calls can run in one iteration, and which never
      run together.
    pure: a host callback JAX declares pure (``pure_callback``: no
      side effect), which touches nothing, as the static check reads it.
    source: the user's file:line of the call, from the module's location
      metadata, or from the call or loop around it where the call's own
      names no file ("" where none does).
    stack: the call's Python stack as its location records it, innermost
      first, as ``(file, line)`` frames (empty where it names no file):
      what the static check's ops of the user's own module carry, by
      which a call is found there (`user_module`).
  """

  number: int
  module: SanitizedModule
  position: int
  target: str
  in_loop: bool
  in_branch: bool
  host_callback: str | None = None
  context: tuple[Frame, ...] = ()
  pure: bool = False
  source: str = ""
  stack: tuple[tuple[str, int], ...] = ()

  def __str__(self) -> str:
    if self.host_callback is not None:
      return f"{self.module.name} native call #{self.position} (host callback)"
    return f"{self.module.name} native call #{self.position}"


_numbers = itertools.count()
_lock = threading.Lock()
_sites: dict[int, CallSite] = {}
_modules: list[SanitizedModule] = []
_markers: dict[int, tuple[int, int]] = {}


def marker(number: int) -> tuple[int, int] | None:
  """For the site number of an iteration marker, its module's serial and
  its loop's number (`Frame.construct`); else None."""
  return _markers.get(number)


def site(number: int) -> CallSite | None:
  """The site of attribute value `number`, if this process made it."""
  return _sites.get(number)


def modules_since(serial: int) -> list[SanitizedModule]:
  """The modules compiled (under the hook) from compile `serial` on."""
  return [m for m in _modules if m.serial >= serial]


def next_serial() -> int:
  """The serial the next compiled module will have."""
  with _lock:
    return len(_modules)


def install() -> Any:
  """Puts the compile hook (and the TPU lowering hook) in place; returns
  the undo."""
  undo_compile = jax_hooks.replace(
    jax_hooks.compiler_module(), jax_hooks.COMPILE, _make_compile
  )
  try:
    undo_tpu = jax_hooks.replace(
      jax_hooks.callback_module(), jax_hooks.TPU_CALLBACK, _make_tpu_emit
    )
  except AttributeError:  # A JAX without it: TPU callbacks not observed.
    undo_tpu = None

  def undo() -> None:
    undo_compile()
    if undo_tpu is not None:
      undo_tpu()
    _lowered.clear()

  return undo


# TPU callbacks lowered under the hook, by the id of the host send/recv
# callback object JAX made for each: (that object, kept so that its id is
# not reused; the place its recorder reads; the Python function's name).
_lowered: dict[int, tuple[Any, callbacks.Place, str | None]] = {}


def _make_tpu_emit(original):
  def emit_tpu_python_callback(backend, ctx, callback, *args, **kwargs):
    place = callbacks.Place()
    recorded = callbacks.late_recorder(callback, place)
    result = original(backend, ctx, recorded, *args, **kwargs)
    try:
      made = ctx.module_context.host_callbacks[-1]
    except (AttributeError, IndexError):
      return result
    with _lock:
      _lowered[id(made)] = (made, place, callbacks.function_name(callback))
    return result

  return emit_tpu_python_callback


def _make_compile(original):
  def compile_or_get_cached(backend, computation, *args, **kwargs):
    platform = wrapping.xla_platform(getattr(backend, "platform", "cpu"))
    module, edited, args_, kwargs_ = _prepare(
      computation, platform, args, kwargs, route=True
    )
    try:
      executable = original(backend, edited, *args_, **kwargs_)
    except Exception:
      if module is None or not module.executions:
        raise
      # An XLA that refuses the execution op or the callbacks' added
      # operands: compiled again without them (the callbacks recorded by
      # their index, with an execution counter where one is needed).
      module, edited, args_, kwargs_ = _prepare(
        computation, platform, args, kwargs, route=False
      )
      executable = original(backend, edited, *args_, **kwargs_)
    if module is not None:
      try:
        module.executable = weakref.ref(executable)
      except TypeError:
        module.executable = lambda: executable
      user_modules.keep(
        module.serial,
        lambda: original(backend, computation, *args, **kwargs),
        computation,
        _bytecode,
      )
    return executable

  return compile_or_get_cached


_HOST_CALLBACKS = jax_hooks.COMPILE_HOST_CALLBACKS


def _prepare(computation, platform: str, args: tuple, kwargs: dict, *, route):
  """What the compile hook compiles in place of `computation` and its
  arguments: (the module's record or None, the module to compile, the
  arguments after the backend and the module, with the host callbacks'
  recorders in place)."""
  given = _host_callbacks(args, kwargs)
  # The edits go on a copy: the caller's module is JAX's, held by its
  # lowering cache and by any `Lowered`, and must stay as the user's
  # program made it after the block (compiled again, printed by races).
  copy = _copy(computation)
  try:
    module = annotate(copy, platform, given, route=route)
  except _NotRouted:
    # Never break a compile: the callbacks recorded by their index then.
    copy = _copy(computation)
    module = annotate(copy, platform, given, route=False)
  if module is None:
    return None, computation, args, kwargs
  module.program = _bytecode(copy)
  if module.transfer_callbacks and given is not None:
    # Their recorders are in place already (`_make_tpu_emit`).
    _place_tpu_callbacks(module, given)
  elif module.executions and given is not None:
    # Each call says its execution and its place (its last operands).
    recorded = list(given)
    for index in module.callbacks:
      recorded[index] = callbacks.execution_recorder(recorded[index], site)
    args, kwargs = _with_host_callbacks(args, kwargs, recorded)
  elif module.callbacks and given is not None:
    recorded = list(given)
    for index, place in module.callbacks.items():
      recorded[index] = callbacks.recorder(recorded[index], place)
    if module.anchor is not None:
      recorded.append(callbacks.recorder(_count, module.anchor))
    args, kwargs = _with_host_callbacks(args, kwargs, recorded)
  return module, copy, args, kwargs


def _copy(computation: Any) -> Any:
  """A copy of an MLIR module, locations included (the calls' source
  lines come from them), in the same context."""
  ir = jax_hooks.mlir_ir()
  with computation.context:
    return ir.Module.parse(_bytecode(computation))


def _bytecode(computation: Any) -> bytes:
  import io

  out = io.BytesIO()
  computation.operation.write_bytecode(file=out)
  return out.getvalue()


def _place_tpu_callbacks(module: SanitizedModule, given: list) -> None:
  """Gives each TPU callback of `module` its place: the k-th host
  send/recv callback object handed to the compile, lowered under the hook,
  is the k-th callback whose first send the walk met (JAX lowers them in
  program order and appends each object as it lowers it). Any mismatch,
  and the callbacks stay not observed."""
  with _lock:
    found = [_lowered.get(id(c)) for c in given]
  walked = module.transfer_callbacks
  if len(walked) != len(given) or any(f is None for f in found):
    return
  for k, (entry, context) in enumerate(zip(found, walked, strict=True)):
    assert entry is not None
    _, place, name = entry
    site = CallSite(
      next(_numbers),
      module,
      len(module.sites),
      TPU_HOST_CALLBACK_TARGET,
      *_loop_branch(context),
      name or "?",
      context=context,
    )
    module.sites.append(site)
    module.callbacks[k] = site
    place.site = site
  module.not_observed.discard(HOST_TRANSFER_CALLBACKS)
  with _lock:
    for site in module.callbacks.values():
      _sites[site.number] = site


def _host_callbacks(args: tuple, kwargs: dict) -> list | None:
  """The host callbacks passed to ``compile_or_get_cached`` (after the
  backend and the module)."""
  name, position = _HOST_CALLBACKS
  if name in kwargs:
    return list(kwargs[name])
  if len(args) > position:
    return list(args[position])
  return None


def _with_host_callbacks(args: tuple, kwargs: dict, value: list):
  name, position = _HOST_CALLBACKS
  if name in kwargs:
    return args, {**kwargs, name: value}
  return (*args[:position], value, *args[position + 1 :]), kwargs


class _NotRouted(Exception):
  """`route_executions` failed part way: the module is to be annotated
  again, on a fresh copy, without it."""


def annotate(
  computation: Any,
  platform: str,
  host_callbacks: list | None = None,
  *,
  route: bool = True,
) -> SanitizedModule | None:
  """Adds the site attribute to each wrapped call of `computation` (an
  MLIR module, edited in place), and gives each host callback's call a
  place (`host_callbacks`: the callables the module's callbacks name by
  index), where it can (`route`) through an execution op that tells each
  call its execution and its place (`route_executions`), else through an
  execution counter where one is needed (`_add_anchor`); the module's
  record, or None when it calls no native target at all.

  Raises:
    _NotRouted: `route_executions` failed part way (`computation` is then
      half edited: annotate a fresh copy with `route` False).
  """
  ir = jax_hooks.mlir_ir()
  with computation.context:
    name = ir.StringAttr(computation.operation.attributes["sym_name"]).value
    with _lock:
      module = SanitizedModule(name, len(_modules), platform)
    functions = {}
    for op in computation.body.operations:
      op = op.operation
      if op.name == "func.func":
        functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
    main = functions.get("main")
    if main is None:
      return None
    module.one_device = mlir_reading.one_device(ir, computation)
    walker = _Walker(ir, computation, functions, module, host_callbacks)
    walker.function(main, context=())
    try:
      routable = route and _routable(ir, computation, module, host_callbacks)
    except Exception:  # Never break a compile: not routed then.
      routable = False
    if routable:
      try:
        module_edits.route_executions(ir, walker.callback_ops)
      except Exception as e:
        raise _NotRouted from e
      module.executions = True
    else:
      try:
        _add_anchor(
          ir, computation, main, module, host_callbacks, walker.callback_ops
        )
      except Exception:  # Never break a compile: no anchor then.
        module.anchor = None
    if not module.sites and not module.not_observed:
      return None
    with _lock:
      _modules.append(module)
      for s in module.sites:
        _sites[s.number] = s
      for number, construct in module.iteration_markers.items():
        _markers[number] = (module.serial, construct)
    return module


class _Walker:
  def __init__(
    self,
    ir,
    computation,
    functions,
    module: SanitizedModule,
    host_callbacks: list | None = None,
  ):
    self.host_callbacks = host_callbacks
    self.ir = ir
    self.computation = computation
    self.functions = functions
    self.module = module
    self.visited: set[str] = set()
    self.copies = itertools.count()
    self.constructs = itertools.count()
    self.callback_ops: dict[int, Any] = {}
    """Each host callback's custom call, by its site's number."""
    self.enclosing: list[str] = []
    """The user's file:line of each call and construct the walk is inside,
    outermost first ("" where its location names no file)."""
    self.iterations: str | None = None
    """The iteration marker's target, where loops get one (one device
    of a CPU, the target wrapped: `mark_iterations`); else None."""
    if _one_cpu(ir, computation, module):
      target = wrapping.iteration_target()
      if wrapping.wrapped(target, module.platform) is not None:
        self.iterations = target
    self.calls: list[tuple[tuple[str, int], ...]] = []
    """The Python stack of each function call the walk is inside,
    outermost first."""

  def stack(self, op) -> tuple[tuple[str, int], ...]:
    """`op`'s Python stack as the HLO of its module records it once its
    functions are inlined: its own location's frames, then those of each
    call it is inside, innermost first (`source_stack`)."""
    out = mlir_reading.source_stack(op)
    for frames in reversed(self.calls):
      out += frames
    return out

  def source(self, op) -> str:
    """The user's file:line of `op`; where its own location names no file
    (a callback that ``vmap`` turned into a loop is located at its
    primitive's name alone), that of the innermost call or construct
    around it that names one."""
    own = mlir_reading.source_line(op)
    if own:
      return own
    return next((s for s in reversed(self.enclosing) if s), "")

  def function(self, func, *, context: tuple[Frame, ...]) -> None:
    self.visited.add(self.ir.StringAttr(func.attributes["sym_name"]).value)
    for region in func.regions:
      self.region(region, context=context)

  def region(self, region, *, context: tuple[Frame, ...]) -> None:
    for block in region.blocks:
      for op in block.operations:
        self.op(op.operation, context=context)

  def op(self, op, *, context: tuple[Frame, ...]) -> None:
    if op.name in _HOST_TRANSFERS and mlir_reading.is_host_transfer(
      self.ir, op
    ):
      self.module.not_observed.add(HOST_TRANSFER_CALLBACKS)
      if op.name == "stablehlo.send" and mlir_reading.starts_a_callback(op):
        self.module.transfer_callbacks.append(context)
      return
    if op.name == "stablehlo.custom_call":
      self.custom_call(op, context=context)
      return
    if op.name == "func.call":
      self.call(op, context=context)
      return
    kind = None
    if op.name in _LOOPS:
      kind = LOOP
    elif op.name in _BRANCHES:
      kind = BRANCH
    construct = next(self.constructs) if kind is not None else -1
    if kind == LOOP:
      trips = trip_counts.trip_count(self.ir, op)
      if trips is not None:
        self.module.loop_trips[construct] = trips
    first = len(self.module.sites)
    self.enclosing.append(mlir_reading.source_line(op) if op.regions else "")
    try:
      for index, region in enumerate(op.regions):
        inner = context
        if kind is not None:
          inner = (*context, Frame(kind, construct, index))
        self.region(region, context=inner)
    finally:
      self.enclosing.pop()
    if (
      kind == LOOP
      and self.iterations is not None
      and any(
        len(site.context) > len(context) + 1
        for site in self.module.sites[first:]
      )
    ):
      # Only where a call runs in an inner loop or a branch of this one:
      # places that each run once an iteration pair by rank, and a marker
      # costs a recorded call an iteration. After the walk of its regions,
      # which must not take it for a call.
      self.mark_iterations(op, construct)

  def mark_iterations(self, op, construct: int) -> None:
    """Puts an iteration marker at the top of loop `op`'s condition
    (`module_edits.add_iteration_marker`): the marker's calls of one
    execution that began before a call of the loop, counted, say which
    iteration of it the call ran in (`columns.NativeColumns.iteration`)."""
    if self.iterations is None:
      return
    number = next(_numbers)
    if module_edits.add_iteration_marker(self.ir, op, self.iterations, number):
      self.module.iteration_markers[number] = construct

  def call(self, op, *, context: tuple[Frame, ...]) -> None:
    ir = self.ir
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    func = self.functions.get(callee)
    if func is None:
      return
    if callee in self.visited:
      # Each call site its own copy, so each call has its own place.
      copy_name = f"{callee}__sanitized_{next(self.copies)}"
      func = func.clone(ip=ir.InsertionPoint(self.computation.body))
      func.attributes["sym_name"] = ir.StringAttr.get(copy_name)
      op.attributes["callee"] = ir.FlatSymbolRefAttr.get(copy_name)
      self.functions[copy_name] = func
    self.enclosing.append(mlir_reading.source_line(op))
    self.calls.append(mlir_reading.source_stack(op))
    try:
      self.function(func, context=context)
    finally:
      self.enclosing.pop()
      self.calls.pop()

  def custom_call(self, op, *, context: tuple[Frame, ...]) -> None:
    ir = self.ir
    attributes = op.attributes
    target = ir.StringAttr(attributes["call_target_name"]).value
    if target == ENTANGLE_TARGET or is_library_target(target):
      return  # They compute from their buffers alone (the static check's word).
    key = mlir_reading.typed_ffi_config(ir, attributes)
    if key is None:
      # The untyped custom-call API: no FFI handler to wrap. Listed when
      # it was registered while the sanitizer ran (JAX's own untyped
      # calls, such as Sharding, are no native call).
      if any(n.name == target for n in wrapping.not_wrapped()):
        self.module.not_observed.add(target)
      return
    if is_host_callback(target) and self.host_callback(
      op, target, key, context
    ):
      return
    if wrapping.wrapped(target, self.module.platform) is None:
      self.module.not_observed.add(target)
      return
    number = next(_numbers)
    entries = {}
    if key in attributes:
      config = ir.DictAttr(attributes[key])
      for k in range(len(config)):
        entry = config[k]
        entries[entry.name] = entry.attr
    entries[SITE_ATTRIBUTE] = ir.IntegerAttr.get(
      ir.IntegerType.get_signless(64), number
    )
    attributes[key] = ir.DictAttr.get(entries)
    self.module.sites.append(
      CallSite(
        number,
        self.module,
        len(self.module.sites),
        target,
        *_loop_branch(context),
        context=context,
        source=self.source(op),
        stack=self.stack(op),
      )
    )

  def host_callback(
    self, op, target: str, key: str, context: tuple[Frame, ...]
  ) -> bool:
    """Gives a host callback's call a place; False when its callable
    cannot be found (it is then listed as not observed)."""
    ir = self.ir
    attributes = op.attributes
    if self.host_callbacks is None or key not in attributes:
      return False
    config = mlir_reading.as_dict(ir, attributes[key])
    if config is None or "index" not in config:
      return False
    index = ir.IntegerAttr(config["index"]).value
    if index < 0 or index >= len(self.host_callbacks):
      return False
    name = callbacks.function_name(self.host_callbacks[index])
    site = CallSite(
      next(_numbers),
      self.module,
      len(self.module.sites),
      target,
      *_loop_branch(context),
      name or "?",
      context=context,
      pure=not access_policy.counts_as_native_call(
        target, mlir_reading.side_effect(ir, attributes)
      ),
      source=self.source(op),
      stack=self.stack(op),
    )
    self.module.sites.append(site)
    self.module.callbacks[index] = site
    self.callback_ops[site.number] = op
    return True


_HOST_TRANSFERS = ("stablehlo.send", "stablehlo.recv")

HOST_TRANSFER_CALLBACKS = (
  "host callbacks made of host transfers (on TPU, io_callback, "
  "jax.debug.callback and pure_callback are send/recv ops whose Python "
  "function the backend calls; the sanitizer cannot record them)"
)
"""How the report names host callbacks it cannot see: on TPU, JAX hands
them to the backend as host send/recv callbacks, not as the Python
callables the compile hook wraps (`_make_compile`)."""


def _one_cpu(ir, computation, module: SanitizedModule) -> bool:
  """Whether `module` runs on one device of a CPU (one partition, one
  replica): of a platform whose calls run on the host
  (`platforms.Platform.host_side`)."""
  if not platforms.host_side(module.platform):
    return False
  return mlir_reading.one_device(ir, computation)


def _routable(ir, computation, module: SanitizedModule, host_callbacks) -> bool:
  """Whether the host callbacks of `module` can each be told their
  execution and place (`route_executions`): it has some, found by their
  index, and runs on one device of a CPU, where the execution op's handler
  is registered and its result is host memory."""
  return (
    host_callbacks is not None
    and bool(module.callbacks)
    and _one_cpu(ir, computation, module)
  )


ANCHOR = "(entangle_jax sanitizer: counts executions)"
"""The function name of the host callback `_add_anchor` adds."""


def _count(*args: Any) -> tuple:
  """The anchor's Python side: does nothing (its recorder counts)."""
  return ()


def _add_anchor(
  ir, computation, main, module: SanitizedModule, host_callbacks, callback_ops
) -> None:
  """Adds a host callback that takes and returns nothing, at the top of
  `main`, whose calls count the module's executions, where every host
  callback of the module is in a loop or a branch (so nothing else says
  which execution their calls ran in). On one device of a CPU only (a
  module of one partition and one replica): elsewhere the module is left
  as it is."""
  own = list(module.callbacks.values())
  if host_callbacks is None or not own or any(not s.context for s in own):
    return
  if not platforms.host_side(module.platform):
    return
  if not module.one_device:
    return
  template = callback_ops.get(own[0].number)
  if template is None:
    return
  if not module_edits.add_anchor(ir, main, template, len(host_callbacks)):
    return
  module.anchor = CallSite(
    next(_numbers),
    module,
    -1,
    own[0].target,
    False,
    False,
    ANCHOR,
    pure=True,
  )


def _loop_branch(context: tuple[Frame, ...]) -> tuple[bool, bool]:
  return (
    any(f.kind == LOOP for f in context),
    any(f.kind == BRANCH for f in context),
  )
