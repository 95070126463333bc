// The module `import entangle_jax` loads: it hands entangle's FFI handler to
// Python as a PyCapsule, which `jax.ffi.register_ffi_target` accepts. It holds
// nothing else, so production users load and register only entangle.
#include <pybind11/pybind11.h>

#include "entangle.h"
#include "native/capsule.h"

PYBIND11_MODULE(_entangle_ffi, m) {
  m.doc() = "entangle_jax's FFI handler.";
  m.def("registrations", [] {
        pybind11::dict handlers;
        handlers["entangle"] =
            entangle_jax::AsCapsule(EntangleJaxEntangle);
        return handlers;
      },
      "FFI handlers by name: {'entangle': the variadic no-op entangle "
      "handler (any platform)}.");
}
