// The CUDA half of the example resource's binding: its device handlers, as
// PyCapsules, in a module of its own so that the CPU build needs no CUDA.
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "example_resource_cuda.h"
#include "native/capsule.h"

using entangle_jax::AsCapsule;

PYBIND11_MODULE(_example_resource_cuda_ffi, m) {
  m.doc() = "CUDA FFI handlers of entangle_jax's example resource.";
  m.def("registrations", [] {
        pybind11::dict handlers;
        handlers["write_slot"] = AsCapsule(EntangleJaxWriteSlotCuda);
        handlers["read_slot"] = AsCapsule(EntangleJaxReadSlotCuda);
        return handlers;
      },
      "FFI handlers by name: {'write_slot': ..., 'read_slot': ...}, for "
      "the CUDA platform.");
  m.def("reset_device_slots", [] {
    if (!entangle_jax::ResetDeviceSlots()) {
      throw std::runtime_error("entangle_jax: resetting CUDA slots failed");
    }
  });
}
