// The Python binding: hands each FFI handler to Python as a PyCapsule, which
// `jax.ffi.register_ffi_target` accepts, plus the host helpers the example
// resource needs outside of XLA.
#include <pybind11/pybind11.h>

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
  m.attr("num_slots") = entangle_jax::kNumSlots;
}
