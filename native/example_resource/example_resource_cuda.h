// The example resource's CUDA store: the same slots as example_resource.h,
// but in device memory, written and read by kernels on the stream XLA hands
// each call. Built only when CUDA is available.
#ifndef ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_CUDA_H_
#define ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace entangle_jax {

// Zeroes every device slot; returns false if CUDA reported an error.
bool ResetDeviceSlots();

}  // namespace entangle_jax

XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxWriteSlotCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxReadSlotCuda);

#endif  // ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_CUDA_H_
