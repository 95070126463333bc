// A tiny mutable native resource, standing in for the hidden state of a real
// native library (an MPI communicator, a solver handle): a fixed table of
// float slots that XLA cannot see. Used by the tests and the demo to show
// what goes wrong when XLA reorders calls that touch shared hidden state.
#ifndef ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_
#define ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace entangle_jax {

inline constexpr int32_t kNumSlots = 64;

// The id the Python wrappers substitute, inside jit, for a slot id of a wider
// integer type that is out of range: its true value does not fit in int32,
// so the error must not pretend to know it.
inline constexpr int32_t kUnrepresentableSlot =
    std::numeric_limits<int32_t>::min();

// Success for a valid slot id, else an out-of-range error naming it. Shared
// by the host and CUDA stores so both report bad ids the same way.
inline xla::ffi::Error CheckSlot(int32_t slot) {
  const std::string range = "[0, " + std::to_string(kNumSlots) + ")";
  if (slot == kUnrepresentableSlot) {
    return xla::ffi::Error(
        xla::ffi::ErrorCode::kOutOfRange,
        "entangle_jax example resource: a slot id is outside " + range +
            " (its integer type is wider than int32)");
  }
  if (slot < 0 || slot >= kNumSlots) {
    return xla::ffi::Error(xla::ffi::ErrorCode::kOutOfRange,
                           "entangle_jax example resource: slot id " +
                               std::to_string(slot) + " is outside " + range);
  }
  return xla::ffi::Error::Success();
}

// The call's delay in microseconds: its optional attribute `delay_us`
// (int64), zero when absent. A negative delay, an attribute of another type
// or any other attribute is an error. Shared by the host and CUDA stores.
inline xla::ffi::ErrorOr<int64_t> DelayUs(const xla::ffi::Dictionary& attrs) {
  const bool has_delay = attrs.contains("delay_us");
  if (attrs.size() != (has_delay ? 1u : 0u)) {
    return xla::ffi::Unexpected(xla::ffi::Error(
        xla::ffi::ErrorCode::kInvalidArgument,
        "entangle_jax example resource: the only attribute a call takes is "
        "delay_us"));
  }
  if (!has_delay) return int64_t{0};
  xla::ffi::ErrorOr<int64_t> delay = attrs.get<int64_t>("delay_us");
  if (!delay.has_value()) {
    return xla::ffi::Unexpected(xla::ffi::Error(
        xla::ffi::ErrorCode::kInvalidArgument,
        "entangle_jax example resource: delay_us must be an int64 (" +
            delay.error().message() + ")"));
  }
  if (*delay < 0) {
    return xla::ffi::Unexpected(
        xla::ffi::Error(xla::ffi::ErrorCode::kInvalidArgument,
                        "entangle_jax example resource: delay_us " +
                            std::to_string(*delay) + " is negative"));
  }
  return delay;
}

// Sets every slot of the host store to zero.
void ResetHostSlots();

// One host call of the example resource, as it actually ran. Sequence
// numbers come from one counter: `start` is taken when the call begins,
// `end` when it has finished, so call a ran before call b iff
// a.end < b.start.
struct CallRecord {
  int64_t start;
  int64_t end;
  bool is_write;
  std::vector<int32_t> slots;
};

// The host calls recorded since the last ClearCallLog, in order of `end`.
// `overflowed` is set when calls were dropped because the log was full.
std::vector<CallRecord> CallLog(bool* overflowed);

// Takes the next number of the counter that the call log's `start` and `end`
// come from.
int64_t NextSequence();

// Forgets every recorded call.
void ClearCallLog();

}  // namespace entangle_jax

// write_slot(slot: s32[...], value: f32[...]) -> token: s32[...]
// Stores value[i] into slot[i], in index order; token[i] = slot[i].
XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxWriteSlotHost);

// read_slot(token: s32[...]) -> value: f32[...]
// value[i] = current content of slot token[i].
XLA_FFI_DECLARE_HANDLER_SYMBOL(EntangleJaxReadSlotHost);

#endif  // ENTANGLE_JAX_NATIVE_EXAMPLE_RESOURCE_H_
