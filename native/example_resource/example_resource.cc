#include "example_resource.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ffi = xla::ffi;

namespace entangle_jax {
namespace {

// Relaxed atomics: XLA:CPU may run unordered calls on different threads, and
// such a race must give a wrong answer, never undefined behaviour.
std::array<std::atomic<float>, kNumSlots> host_slots{};

// The call log: enough for the tests' thousands of calls, bounded so that a
// long-running user program cannot grow it without limit.
constexpr size_t kMaxLoggedCalls = 1 << 16;
std::atomic<int64_t> next_sequence{0};
std::mutex log_mutex;
std::vector<CallRecord> call_log;
bool log_overflowed = false;

void Record(int64_t start, bool is_write, const int32_t* slots, size_t n) {
  std::vector<int32_t> ids(slots, slots + n);
  std::lock_guard<std::mutex> lock(log_mutex);
  // The end number is taken under the lock, so the log is sorted by it.
  const int64_t end = NextSequence();
  if (call_log.size() >= kMaxLoggedCalls) {
    log_overflowed = true;
    return;
  }
  call_log.push_back(CallRecord{start, end, is_write, std::move(ids)});
}

// Holds the calling thread for `delay_us` microseconds, inside the call's
// logged interval, so that calls XLA leaves unordered overlap in time.
void Delay(int64_t delay_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
}

ffi::Error WriteSlot(ffi::Buffer<ffi::S32> slot, ffi::Buffer<ffi::F32> value,
                     ffi::ResultBuffer<ffi::S32> token,
                     ffi::Dictionary attrs) {
  const int64_t start = NextSequence();
  const size_t n = slot.element_count();
  if (value.element_count() != n) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "write_slot: slot and value differ in size");
  }
  // Validate everything first so that a bad id leaves the store untouched.
  ffi::ErrorOr<int64_t> delay_us = DelayUs(attrs);
  if (!delay_us.has_value()) return delay_us.error();
  for (size_t i = 0; i < n; ++i) {
    if (ffi::Error err = CheckSlot(slot.typed_data()[i]); err.failure()) {
      return err;
    }
  }
  Delay(*delay_us);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = slot.typed_data()[i];
    host_slots[id].store(value.typed_data()[i], std::memory_order_relaxed);
    token->typed_data()[i] = id;
  }
  Record(start, /*is_write=*/true, slot.typed_data(), n);
  return ffi::Error::Success();
}

ffi::Error ReadSlot(ffi::Buffer<ffi::S32> token,
                    ffi::ResultBuffer<ffi::F32> value, ffi::Dictionary attrs) {
  const int64_t start = NextSequence();
  const size_t n = token.element_count();
  ffi::ErrorOr<int64_t> delay_us = DelayUs(attrs);
  if (!delay_us.has_value()) return delay_us.error();
  for (size_t i = 0; i < n; ++i) {
    if (ffi::Error err = CheckSlot(token.typed_data()[i]); err.failure()) {
      return err;
    }
  }
  Delay(*delay_us);
  for (size_t i = 0; i < n; ++i) {
    value->typed_data()[i] =
        host_slots[token.typed_data()[i]].load(std::memory_order_relaxed);
  }
  Record(start, /*is_write=*/false, token.typed_data(), n);
  return ffi::Error::Success();
}

}  // namespace

int64_t NextSequence() {
  return next_sequence.fetch_add(1, std::memory_order_seq_cst);
}

void ResetHostSlots() {
  for (std::atomic<float>& slot : host_slots) {
    slot.store(0.0f, std::memory_order_relaxed);
  }
}

std::vector<CallRecord> CallLog(bool* overflowed) {
  std::lock_guard<std::mutex> lock(log_mutex);
  *overflowed = log_overflowed;
  return call_log;
}

void ClearCallLog() {
  std::lock_guard<std::mutex> lock(log_mutex);
  call_log.clear();
  log_overflowed = false;
}

}  // namespace entangle_jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxWriteSlotHost,
                              entangle_jax::WriteSlot,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attrs());

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxReadSlotHost,
                              entangle_jax::ReadSlot,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attrs());
