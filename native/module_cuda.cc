// The CUDA half of the binding: the example resource's device handlers, as
// PyCapsules, in a module of its own so that the CPU build needs no CUDA.
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "capsule.h"
#include "example_resource_cuda.h"

using entangle_jax::AsCapsule;

PYBIND11_MODULE(_native_cuda, m) {
  m.doc() = "CUDA FFI handlers of entangle_jax's example resource.";
  m.def("write_slot_cuda_handler",
        [] { return AsCapsule(EntangleJaxWriteSlotCuda); });
  m.def("read_slot_cuda_handler",
        [] { return AsCapsule(EntangleJaxReadSlotCuda); });
  m.def("reset_device_slots", [] {
    if (!entangle_jax::ResetDeviceSlots()) {
      throw std::runtime_error("entangle_jax: resetting CUDA slots failed");
    }
  });
}
