"""Each wrapped call's place in its program.

While the sanitizer runs, every module JAX compiles passes through
`annotate` first: each custom call to a wrapped target gets one more FFI
attribute, ``entangle_jax_sanitize_site = N`` (an int64, unique in the
process), which the trampoline reads and strips before the original
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

from entangle_jax._src.targets.names import (
  TPU_HOST_CALLBACK_TARGET,
  is_host_callback,
)
from entangle_jax.testing._sanitize import callbacks, jax_hooks, wrapping

SITE_ATTRIBUTE = "entangle_jax_sanitize_site"
TYPED_FFI = 4
"""``api_version`` of a typed FFI custom call in StableHLO."""
_LOOPS = ("stablehlo.while",)
_BRANCHES = ("stablehlo.case", "stablehlo.if")


@dataclasses.dataclass(eq=False)
class SanitizedModule:
  """A module compiled while the sanitizer ran."""

  name: str
  serial: int
  platform: str
  sites: list[CallSite] = dataclasses.field(default_factory=list)
  not_observed: set[str] = dataclasses.field(default_factory=set)
  """Typed FFI targets it calls that run unwrapped (registered before the
  sanitizer started)."""
  callbacks: dict[int, CallSite] = dataclasses.field(default_factory=dict)
  """Its host callbacks' places, by their index in the callbacks XLA is
  given with the module."""
  transfer_callbacks: list[tuple[bool, bool]] = dataclasses.field(
    default_factory=list
  )
  """Its host callbacks made of host transfers (TPU), in program order:
  whether each is in a loop, in a branch."""
  executable: Any = None

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
    host_callback: for a host callback, its Python function's name (or
      ``"?"`` where it could not be found); None for a native call.
  """

  number: int
  module: SanitizedModule
  position: int
  target: str
  in_loop: bool
  in_branch: bool
  host_callback: str | None = None

  def __str__(self) -> str:
    if self.host_callback is not None:
      return f"{self.module.name} native call #{self.position} (host callback)"
    return f"{self.module.name} native call #{self.position}"


_numbers = itertools.count()
_serials = itertools.count()
_lock = threading.Lock()
_sites: dict[int, CallSite] = {}
_modules: list[SanitizedModule] = []


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
    given = _host_callbacks(args, kwargs)
    module = annotate(computation, platform, given)
    if module is not None and module.transfer_callbacks and given is not None:
      # Their recorders are in place already (`_make_tpu_emit`).
      _place_tpu_callbacks(module, given)
    elif module is not None and module.callbacks and given is not None:
      recorded = list(given)
      for index, site in module.callbacks.items():
        recorded[index] = callbacks.recorder(recorded[index], site)
      args, kwargs = _with_host_callbacks(args, kwargs, recorded)
    executable = original(backend, computation, *args, **kwargs)
    if module is not None:
      try:
        module.executable = weakref.ref(executable)
      except TypeError:
        module.executable = lambda: executable
    return executable

  return compile_or_get_cached


_HOST_CALLBACKS = jax_hooks.COMPILE_HOST_CALLBACKS


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
  for k, (entry, (in_loop, in_branch)) in enumerate(
    zip(found, walked, strict=True)
  ):
    assert entry is not None
    _, place, name = entry
    site = CallSite(
      next(_numbers),
      module,
      len(module.sites),
      TPU_HOST_CALLBACK_TARGET,
      in_loop,
      in_branch,
      name or "?",
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


def annotate(
  computation: Any, platform: str, host_callbacks: list | None = None
) -> SanitizedModule | None:
  """Adds the site attribute to each wrapped call of `computation` (an
  MLIR module, edited in place), and gives each host callback's call a
  place (`host_callbacks`: the callables the module's callbacks name by
  index); the module's record, or None when it calls no native target at
  all."""
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
    walker = _Walker(ir, computation, functions, module, host_callbacks)
    walker.function(main, in_loop=False, in_branch=False)
    if not module.sites and not module.not_observed:
      return None
    with _lock:
      _modules.append(module)
      for s in module.sites:
        _sites[s.number] = s
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

  def function(self, func, *, in_loop: bool, in_branch: bool) -> None:
    self.visited.add(self.ir.StringAttr(func.attributes["sym_name"]).value)
    for region in func.regions:
      self.region(region, in_loop=in_loop, in_branch=in_branch)

  def region(self, region, *, in_loop: bool, in_branch: bool) -> None:
    for block in region.blocks:
      for op in block.operations:
        self.op(op.operation, in_loop=in_loop, in_branch=in_branch)

  def op(self, op, *, in_loop: bool, in_branch: bool) -> None:
    if op.name in _HOST_TRANSFERS and _is_host_transfer(self.ir, op):
      self.module.not_observed.add(HOST_TRANSFER_CALLBACKS)
      if op.name == "stablehlo.send" and _starts_a_callback(op):
        self.module.transfer_callbacks.append((in_loop, in_branch))
      return
    if op.name == "stablehlo.custom_call":
      self.custom_call(op, in_loop=in_loop, in_branch=in_branch)
      return
    if op.name == "func.call":
      self.call(op, in_loop=in_loop, in_branch=in_branch)
      return
    loop = in_loop or op.name in _LOOPS
    branch = in_branch or op.name in _BRANCHES
    for region in op.regions:
      self.region(region, in_loop=loop, in_branch=branch)

  def call(self, op, *, in_loop: bool, in_branch: bool) -> None:
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
    self.function(func, in_loop=in_loop, in_branch=in_branch)

  def custom_call(self, op, *, in_loop: bool, in_branch: bool) -> None:
    ir = self.ir
    attributes = op.attributes
    target = ir.StringAttr(attributes["call_target_name"]).value
    key = _typed_ffi_config(ir, attributes)
    if key is None:
      return  # The untyped custom-call API: no FFI handler to wrap.
    if is_host_callback(target) and self.host_callback(
      op, target, key, in_loop, in_branch
    ):
      return
    if wrapping.wrapped(target, self.module.platform) is None:
      if target != wrapping.ENTANGLE_TARGET:
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
        in_loop,
        in_branch,
      )
    )

  def host_callback(
    self, op, target: str, key: str, in_loop: bool, in_branch: bool
  ) -> bool:
    """Gives a host callback's call a place; False when its callable
    cannot be found (it is then listed as not observed)."""
    ir = self.ir
    attributes = op.attributes
    if self.host_callbacks is None or key not in attributes:
      return False
    config = _as_dict(ir, attributes[key])
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
      in_loop,
      in_branch,
      name or "?",
    )
    self.module.sites.append(site)
    self.module.callbacks[index] = site
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


def _starts_a_callback(op) -> bool:
  """Whether a host ``stablehlo.send`` is its callback's first: its token
  does not come from another send (JAX chains a callback's sends, then its
  receives, through one token)."""
  try:
    token = op.operands[1]
    owner = token.owner
    name = getattr(owner, "name", None)
    if name is None:  # A block argument, or an op seen through its view.
      name = getattr(getattr(owner, "operation", None), "name", None)
  except (IndexError, AttributeError, ValueError):
    return True
  return name != "stablehlo.send"


def _is_host_transfer(ir, op) -> bool:
  """Whether a ``stablehlo.send``/``recv`` goes to or from the host."""
  if "is_host_transfer" not in op.attributes:
    return False
  try:
    return bool(ir.BoolAttr(op.attributes["is_host_transfer"]).value)
  except (ValueError, TypeError):
    return False


def _as_dict(ir, attribute):
  """`attribute` as a DictAttr, or None when it is not one."""
  try:
    return ir.DictAttr(attribute)
  except (ValueError, TypeError):
    return None


def _typed_ffi_config(ir, attributes) -> str | None:
  """The attribute that holds a typed FFI call's attributes (JAX writes
  ``mhlo.backend_config`` with ``api_version = 1``; StableHLO's own form is
  ``backend_config`` with ``api_version = 4``), or None for an untyped
  custom call."""
  if (
    "mhlo.backend_config" in attributes
    and _as_dict(ir, attributes["mhlo.backend_config"]) is not None
  ):
    return "mhlo.backend_config"
  if (
    "api_version" in attributes
    and ir.IntegerAttr(attributes["api_version"]).value == TYPED_FFI
  ) and (
    "backend_config" not in attributes
    or _as_dict(ir, attributes["backend_config"]) is not None
  ):
    return "backend_config"
  return None
