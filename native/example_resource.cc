#include "example_resource.h"

#include <array>
#include <atomic>
#include <cstddef>

namespace ffi = xla::ffi;

namespace entangle_jax {
namespace {

// Relaxed atomics: XLA:CPU may run unordered calls on different threads, and
// such a race must give a wrong answer, never undefined behaviour.
std::array<std::atomic<float>, kNumSlots> host_slots{};

ffi::Error WriteSlot(ffi::Buffer<ffi::S32> slot, ffi::Buffer<ffi::F32> value,
                     ffi::ResultBuffer<ffi::S32> token) {
  const size_t n = slot.element_count();
  if (value.element_count() != n) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "write_slot: slot and value differ in size");
  }
  // Validate everything first so that a bad id leaves the store untouched.
  for (size_t i = 0; i < n; ++i) {
    if (ffi::Error err = CheckSlot(slot.typed_data()[i]); err.failure()) {
      return err;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = slot.typed_data()[i];
    host_slots[id].store(value.typed_data()[i], std::memory_order_relaxed);
    token->typed_data()[i] = id;
  }
  return ffi::Error::Success();
}

ffi::Error ReadSlot(ffi::Buffer<ffi::S32> token,
                    ffi::ResultBuffer<ffi::F32> value) {
  const size_t n = token.element_count();
  for (size_t i = 0; i < n; ++i) {
    if (ffi::Error err = CheckSlot(token.typed_data()[i]); err.failure()) {
      return err;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    value->typed_data()[i] =
        host_slots[token.typed_data()[i]].load(std::memory_order_relaxed);
  }
  return ffi::Error::Success();
}

}  // namespace

void ResetHostSlots() {
  for (std::atomic<float>& slot : host_slots) {
    slot.store(0.0f, std::memory_order_relaxed);
  }
}

}  // namespace entangle_jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxWriteSlotHost,
                              entangle_jax::WriteSlot,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxReadSlotHost,
                              entangle_jax::ReadSlot,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
