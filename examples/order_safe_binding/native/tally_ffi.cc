// The tally library's XLA FFI handlers: what jax.ffi.ffi_call runs. Each
// takes arrays of any shape and works element by element, so that a batch
// of handles (vmap with vmap_method="broadcast_all") is one call. Every
// call that touches an accumulator takes its handle first and, if it
// changes the accumulator, hands the handle back as its result: the token
// the next call on it takes (tally_jax/_ffi.py).
#include <cstdint>
#include <string>

#include "tally.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error NoSuchHandle(int32_t handle) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                    "tally: no accumulator with handle " +
                        std::to_string(handle) + " (destroyed, or never made)");
}

ffi::Error SameSize(size_t a, size_t b) {
  if (a == b) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                    "tally: " + std::to_string(a) + " handles but " +
                        std::to_string(b) + " values");
}

// tally_create(initial: f32[...]) -> handles: s32[...]
ffi::Error CreateImpl(ffi::Buffer<ffi::F32> initial,
                      ffi::ResultBuffer<ffi::S32> handles) {
  for (size_t i = 0; i < initial.element_count(); ++i) {
    handles->typed_data()[i] = tally::Create(initial.typed_data()[i]);
  }
  return ffi::Error::Success();
}

// tally_add(handles: s32[...], amounts: f32[...]) -> handles: s32[...]
ffi::Error AddImpl(ffi::Buffer<ffi::S32> handles, ffi::Buffer<ffi::F32> amounts,
                   ffi::ResultBuffer<ffi::S32> handles_out) {
  if (auto error = SameSize(handles.element_count(), amounts.element_count());
      error.failure()) {
    return error;
  }
  for (size_t i = 0; i < handles.element_count(); ++i) {
    int32_t handle = handles.typed_data()[i];
    if (!tally::Add(handle, amounts.typed_data()[i])) return NoSuchHandle(handle);
    handles_out->typed_data()[i] = handle;
  }
  return ffi::Error::Success();
}

// tally_get(handles: s32[...]) -> values: f32[...]
ffi::Error GetImpl(ffi::Buffer<ffi::S32> handles,
                   ffi::ResultBuffer<ffi::F32> values) {
  for (size_t i = 0; i < handles.element_count(); ++i) {
    int32_t handle = handles.typed_data()[i];
    if (!tally::Get(handle, &values->typed_data()[i])) {
      return NoSuchHandle(handle);
    }
  }
  return ffi::Error::Success();
}

// tally_destroy(handles: s32[...]) -> handles: s32[...]
ffi::Error DestroyImpl(ffi::Buffer<ffi::S32> handles,
                       ffi::ResultBuffer<ffi::S32> handles_out) {
  for (size_t i = 0; i < handles.element_count(); ++i) {
    int32_t handle = handles.typed_data()[i];
    if (!tally::Destroy(handle)) return NoSuchHandle(handle);
    handles_out->typed_data()[i] = handle;
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(TallyCreate, CreateImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(TallyAdd, AddImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(TallyGet, GetImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(TallyDestroy, DestroyImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

// Plain C entry points for settings and counts that are not array calls
// (tally_jax loads them with ctypes).
extern "C" {
void tally_set_query_delay_us(int64_t microseconds) {
  tally::SetQueryDelay(microseconds);
}
int64_t tally_live_count() { return tally::LiveCount(); }
}
