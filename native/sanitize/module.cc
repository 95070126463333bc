// The sanitizer's module, loaded by entangle_jax.testing.sanitize only: it
// wraps FFI handlers (PyCapsules, as jax.ffi.register_ffi_target takes them)
// in recording trampolines, switches recording on and off, and hands the
// records to Python.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "native/capsule.h"
#include "sanitize.h"

namespace sanitize = entangle_jax::sanitize;

namespace {

XLA_FFI_Handler* HandlerOf(const pybind11::object& capsule) {
  PyObject* raw = capsule.ptr();
  if (!PyCapsule_CheckExact(raw)) {
    throw std::invalid_argument("an FFI handler must be a PyCapsule");
  }
  void* pointer = PyCapsule_GetPointer(raw, PyCapsule_GetName(raw));
  if (pointer == nullptr) throw pybind11::error_already_set();
  return reinterpret_cast<XLA_FFI_Handler*>(pointer);
}

}  // namespace

PYBIND11_MODULE(_sanitize_ffi, m) {
  m.doc() = "entangle_jax's run-time sanitizer: recording FFI trampolines.";
  m.def(
      "wrap",
      [](const pybind11::object& handler, int32_t object_operand,
         bool host) -> pybind11::tuple {
        int32_t index = -1;
        XLA_FFI_Handler* trampoline =
            sanitize::Wrap(HandlerOf(handler), object_operand, host, &index);
        if (trampoline == nullptr) {
          return pybind11::make_tuple(pybind11::none(), -1);
        }
        return pybind11::make_tuple(entangle_jax::AsCapsule(trampoline),
                                    index);
      },
      pybind11::arg("handler"), pybind11::arg("object_operand"),
      pybind11::arg("host"),
      "(trampoline capsule, index) for an FFI handler capsule; (None, -1) "
      "when every trampoline is in use.");
  m.def("set_recording", &sanitize::SetRecording,
        "Starts (True) or stops (False) recording calls.");
  m.def("now_ns", &sanitize::NowNs, "The records' clock, in nanoseconds.");
  m.def(
      "drain",
      [] {
        int64_t dropped = 0;
        std::vector<sanitize::ThreadRecord> drained = sanitize::Drain(&dropped);
        std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t,
                               int32_t, bool, bool, std::vector<int32_t>,
                               std::vector<int64_t>>>
            out;
        out.reserve(drained.size());
        for (const sanitize::ThreadRecord& t : drained) {
          const sanitize::Record& r = t.record;
          std::vector<int32_t> operands(r.operand, r.operand + r.n_values);
          std::vector<int64_t> values(r.values, r.values + r.n_values);
          out.emplace_back(t.thread, r.start_ns, r.end_ns, r.site, r.run_id,
                           r.wrapped, r.failed != 0, r.truncated != 0,
                           std::move(operands), std::move(values));
        }
        return pybind11::make_tuple(out, dropped);
      },
      "(records, dropped): each record (thread, start_ns, end_ns, site, "
      "run_id, wrapped, failed, truncated, operands, values), made since "
      "the last drain; dropped: calls a full log could not hold.");
  m.attr("site_attribute") = sanitize::kSiteAttribute;
  m.attr("max_wrapped") = sanitize::kMaxWrapped;
}
