// The example resource's host module, loaded by `import entangle_jax.testing`
// only: its FFI handlers as PyCapsules (for `jax.ffi.register_ffi_target`),
// plus the host helpers the store needs outside of XLA.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>
#include <vector>

#include "example_resource.h"
#include "native/capsule.h"

using entangle_jax::AsCapsule;

PYBIND11_MODULE(_example_resource_ffi, m) {
  m.doc() = "Host FFI handlers of entangle_jax's example resource.";
  m.def("registrations", [] {
        pybind11::dict handlers;
        handlers["write_slot"] = AsCapsule(EntangleJaxWriteSlotHost);
        handlers["read_slot"] = AsCapsule(EntangleJaxReadSlotHost);
        return handlers;
      },
      "FFI handlers by name: {'write_slot': ..., 'read_slot': ...}, for "
      "the host platform.");
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
  m.def("next_sequence", &entangle_jax::NextSequence,
        "Takes the next number of the counter the call log's start and end "
        "come from.");
  m.attr("num_slots") = entangle_jax::kNumSlots;
  m.attr("unrepresentable_slot") = entangle_jax::kUnrepresentableSlot;
}
