// The sanitizer's module, loaded by entangle_jax.testing.sanitize only: it
// wraps FFI handlers (PyCapsules, as jax.ffi.register_ffi_target takes them)
// in recording trampolines, switches recording on and off, and hands the
// records to Python.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
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

// drain's and peek's tuple: (records, overflow operands, overflow values,
// dropped), the records as the bytes of packed ThreadRecord structs.
pybind11::tuple AsTuple(const sanitize::Drained& drained) {
  const auto& records = drained.records;
  pybind11::bytes raw(reinterpret_cast<const char*>(records.data()),
                      records.size() * sizeof(sanitize::ThreadRecord));
  pybind11::bytes operands(
      reinterpret_cast<const char*>(drained.overflow_operand.data()),
      drained.overflow_operand.size());
  pybind11::bytes values(
      reinterpret_cast<const char*>(drained.overflow_values.data()),
      drained.overflow_values.size() * sizeof(int64_t));
  return pybind11::make_tuple(raw, operands, values, drained.dropped);
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
      "drain", [] { return AsTuple(sanitize::Drain()); },
      "(records, overflow_operands, overflow_values, dropped): the records "
      "made since the last drain, as the bytes of packed ThreadRecord "
      "structs (record_layout says where each field is); the values past "
      "max_values of records with more (uint8 operands, int64 values; a "
      "record's overflow field indexes them); dropped: calls a full log "
      "could not hold.");
  m.def(
      "peek", [] { return AsTuple(sanitize::Peek()); },
      "drain's tuple, of the records made since the last drain, which the "
      "logs keep (the next drain returns them too).");
  m.def(
      "in_flight",
      [] {
        pybind11::list out;
        for (const sanitize::InFlight& call : sanitize::CallsInFlight()) {
          out.append(pybind11::make_tuple(call.thread, call.start_ns,
                                          call.site, call.wrapped,
                                          call.device));
        }
        return out;
      },
      "The calls recorded threads are in now, one a thread at most: a list "
      "of (thread, start_ns, site, wrapped, device), as a record names "
      "them (start_ns on now_ns's clock; site -1: none; device -1: not "
      "known).");
  m.attr("max_threads") = sanitize::kMaxThreads;
  {
    using sanitize::Record;
    using sanitize::ThreadRecord;
    constexpr size_t kRecord = offsetof(ThreadRecord, record);
    pybind11::dict layout;
    layout["itemsize"] = sizeof(ThreadRecord);
    layout["thread"] = offsetof(ThreadRecord, thread);
    layout["start_ns"] = kRecord + offsetof(Record, start_ns);
    layout["end_ns"] = kRecord + offsetof(Record, end_ns);
    layout["site"] = kRecord + offsetof(Record, site);
    layout["run_id"] = kRecord + offsetof(Record, run_id);
    layout["wrapped"] = kRecord + offsetof(Record, wrapped);
    layout["failed"] = kRecord + offsetof(Record, failed);
    layout["n_values"] = kRecord + offsetof(Record, n_values);
    layout["truncated"] = kRecord + offsetof(Record, truncated);
    layout["overflow"] = kRecord + offsetof(Record, overflow);
    layout["device"] = kRecord + offsetof(Record, device);
    layout["operand"] = kRecord + offsetof(Record, operand);
    layout["values"] = kRecord + offsetof(Record, values);
    layout["max_values"] = sanitize::kMaxValues;
    layout["max_total_values"] = sanitize::kMaxTotalValues;
    m.attr("record_layout") = layout;
  }
  m.def(
      "execution_handler",
      [] { return entangle_jax::AsCapsule(&sanitize::Execution); },
      "The execution op's FFI handler capsule (execution_target): writes "
      "XLA's run id of the execution into its S64 scalar result.");
  m.attr("execution_target") = sanitize::kExecutionTarget;
  m.attr("site_attribute") = sanitize::kSiteAttribute;
  m.attr("max_wrapped") = sanitize::kMaxWrapped;
}
