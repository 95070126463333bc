// A third-party-style native library and its XLA FFI handlers, for the
// race check's tests: counters behind integer handles, as real libraries
// keep their state, with no entangle-jax anywhere. Built by
// tests/third_party_binding/build.py with a plain compiler and the headers
// of the installed jaxlib (jax.ffi.include_dir()).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Calls on different handles run concurrently under XLA:CPU: one lock.
std::mutex counters_lock;
std::unordered_map<int32_t, float> counters;

// tp_counter_set(handle, value) -> handle: stores value; hands the handle
// back, so that a caller can chain the next call on it.
ffi::Error CounterSet(ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> value,
                      ffi::ResultBuffer<ffi::S32> handle_out) {
  std::lock_guard<std::mutex> hold(counters_lock);
  counters[handle.typed_data()[0]] = value.typed_data()[0];
  handle_out->typed_data()[0] = handle.typed_data()[0];
  return ffi::Error::Success();
}

// tp_counter_get(handle) -> value, after `delay_us` microseconds: a slow
// query, so that a write nothing orders after it can overtake it.
ffi::Error CounterGet(ffi::Buffer<ffi::S32> handle,
                      ffi::ResultBuffer<ffi::F32> value, int64_t delay_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  std::lock_guard<std::mutex> hold(counters_lock);
  auto found = counters.find(handle.typed_data()[0]);
  value->typed_data()[0] = found == counters.end() ? 0.0f : found->second;
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(TpCounterSet, CounterSet,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(TpCounterGet, CounterGet,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("delay_us"));
