// A tiny mutable native resource, standing in for the hidden state of a real
// native library (an MPI communicator, a solver handle): a fixed table of
// float slots that XLA cannot see. Used by the tests and the demo to show
// what goes wrong when XLA reorders calls that touch shared hidden state.
#ifndef ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_
#define ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace entangle_jax {

inline constexpr int32_t kNumSlots = 64;

// Success for a valid slot id, else an out-of-range error naming it. Shared
// by the host and CUDA stores so both report bad ids the same way.
inline xla::ffi::Error CheckSlot(int32_t slot) {
  if (slot < 0 || slot >= kNumSlots) {
    return xla::ffi::Error(xla::ffi::ErrorCode::kOutOfRange,
                           "entangle_jax example resource: slot id " +
                               std::to_string(slot) + " is outside [0, " +
                               std::to_string(kNumSlots) + ")");
  }
  return xla::ffi::Error::Success();
}

// Sets every slot of the host store to zero.
void ResetHostSlots();

}  // namespace entangle_jax

// write_slot(slot: s32[...], value: f32[...]) -> token: s32[...]
// Stores value[i] into slot[i], in index order; token[i] = slot[i].
XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxWriteSlotHost);

// read_slot(token: s32[...]) -> value: f32[...]
// value[i] = current content of slot token[i].
XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxReadSlotHost);

#endif  // ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_
