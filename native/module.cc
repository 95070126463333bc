// The Python binding: hands each FFI handler to Python as a PyCapsule, which
// `jax.ffi.register_ffi_target` accepts, plus the host helpers the example
// resource needs outside of XLA.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>
#include <vector>

#include "capsule.h"
#include "entangle.h"
#include "example_resource.h"

using entangle_jax::AsCapsule;

PYBIND11_MODULE(_native, m) {
  m.doc() = "Native FFI handlers of entangle_jax.";
  m.def("entangle_handler", [] { return AsCapsule(EntangleJaxEntangle); },
        "The variadic no-op entangle handler (XLA FFI, any platform).");
  m.def("write_slot_host_handler",
        [] { return AsCapsule(EntangleJaxWriteSlotHost); },
        "Host handler of the example resource's write_slot.");
  m.def("read_slot_host_handler",
        [] { return AsCapsule(EntangleJaxReadSlotHost); },
        "Host handler of the example resource's read_slot.");
  m.def("reset_host_slots", &entangle_jax::ResetHostSlots,
        "Sets every slot of the host example resource to zero.");
  m.def(
      "call_log",
      [] {
        bool overflowed = false;
        std::vector<entangle_jax::CallRecord> log =
            entangle_jax::CallLog(&overflowed);
        if (overflowed) {
          throw std::runtime_error(
              "entangle_jax example resource: the call log is full; clear "
              "it (reset_slots) more often");
        }
        std::vector<std::tuple<int64_t, int64_t, bool, std::vector<int32_t>>>
            records;
        records.reserve(log.size());
        for (const entangle_jax::CallRecord& r : log) {
          records.emplace_back(r.start, r.end, r.is_write, r.slots);
        }
        return records;
      },
      "The host calls recorded since the log was last cleared: (start, end, "
      "is_write, slots) tuples in order of end.");
  m.def("clear_call_log", &entangle_jax::ClearCallLog,
        "Forgets every recorded host call.");
  m.attr("num_slots") = entangle_jax::kNumSlots;
  m.attr("unrepresentable_slot") = entangle_jax::kUnrepresentableSlot;
}
