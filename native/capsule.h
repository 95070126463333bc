// Wraps an FFI handler in the PyCapsule that jax.ffi.register_ffi_target
// expects.
#ifndef ENTANGLE_JAX_NATIVE_CAPSULE_H_
#define ENTANGLE_JAX_NATIVE_CAPSULE_H_

#include <pybind11/pybind11.h>

namespace entangle_jax {

template <typename Fn>
pybind11::capsule AsCapsule(Fn* fn) {
  return pybind11::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace entangle_jax

#endif  // ENTANGLE_JAX_NATIVE_CAPSULE_H_
