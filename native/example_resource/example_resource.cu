#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "example_resource.h"
#include "example_resource_cuda.h"

namespace ffi = xla::ffi;

namespace entangle_jax {
namespace {

__device__ float device_slots[kNumSlots];

// One thread, in index order: element i's write must win over element j < i
// for the same slot, as on the host.
__global__ void WriteKernel(const int32_t* slot, const float* value,
                            int32_t* token, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    device_slots[slot[i]] = value[i];
    token[i] = slot[i];
  }
}

__global__ void ReadKernel(const int32_t* token, float* value, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += blockDim.x * gridDim.x) {
    value[i] = device_slots[token[i]];
  }
}

// Spins until `delay_ns` of the GPU's global timer have passed: the call then
// takes time on its stream, as the host call takes time on its thread.
__global__ void DelayKernel(int64_t delay_ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= static_cast<uint64_t>(delay_ns)) return;
    __nanosleep(1000);
  }
}

ffi::Error CudaError(cudaError_t status, const char* what) {
  return ffi::Error(ffi::ErrorCode::kInternal,
                    std::string(what) + ": " + cudaGetErrorString(status));
}

// Slot ids live in device memory; copying them to the host (and waiting for
// that copy) is the price of rejecting a bad id before any kernel touches
// the store. This is a test resource, not a fast path.
ffi::Error CheckSlots(cudaStream_t stream, const int32_t* ids, size_t n) {
  std::vector<int32_t> host(n);
  if (n == 0) return ffi::Error::Success();
  cudaError_t status = cudaMemcpyAsync(host.data(), ids, n * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) return CudaError(status, "reading slot ids");
  for (int32_t id : host) {
    if (ffi::Error err = CheckSlot(id); err.failure()) return err;
  }
  return ffi::Error::Success();
}

ffi::Error Delay(cudaStream_t stream, const ffi::Dictionary& attrs) {
  ffi::ErrorOr<int64_t> delay_us = DelayUs(attrs);
  if (!delay_us.has_value()) return delay_us.error();
  if (*delay_us == 0) return ffi::Error::Success();
  DelayKernel<<<1, 1, 0, stream>>>(*delay_us * 1000);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return CudaError(status, "delay kernel");
  return ffi::Error::Success();
}

ffi::Error WriteSlot(cudaStream_t stream, ffi::Buffer<ffi::S32> slot,
                     ffi::Buffer<ffi::F32> value,
                     ffi::ResultBuffer<ffi::S32> token,
                     ffi::Dictionary attrs) {
  const size_t n = slot.element_count();
  if (value.element_count() != n) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "write_slot: slot and value differ in size");
  }
  if (ffi::Error err = CheckSlots(stream, slot.typed_data(), n);
      err.failure()) {
    return err;
  }
  if (ffi::Error err = Delay(stream, attrs); err.failure()) return err;
  if (n == 0) return ffi::Error::Success();
  WriteKernel<<<1, 1, 0, stream>>>(slot.typed_data(), value.typed_data(),
                                   token->typed_data(), n);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return CudaError(status, "write_slot kernel");
  return ffi::Error::Success();
}

ffi::Error ReadSlot(cudaStream_t stream, ffi::Buffer<ffi::S32> token,
                    ffi::ResultBuffer<ffi::F32> value, ffi::Dictionary attrs) {
  const size_t n = token.element_count();
  if (ffi::Error err = CheckSlots(stream, token.typed_data(), n);
      err.failure()) {
    return err;
  }
  if (ffi::Error err = Delay(stream, attrs); err.failure()) return err;
  if (n == 0) return ffi::Error::Success();
  const int threads = 128;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  ReadKernel<<<blocks, threads, 0, stream>>>(token.typed_data(),
                                             value->typed_data(), n);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return CudaError(status, "read_slot kernel");
  return ffi::Error::Success();
}

}  // namespace

bool ResetDeviceSlots() {
  float zeros[kNumSlots] = {};
  return cudaMemcpyToSymbol(device_slots, zeros, sizeof(zeros)) ==
             cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}

}  // namespace entangle_jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxWriteSlotCuda,
                              entangle_jax::WriteSlot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attrs());

XLA_FFI_DEFINE_HANDLER_SYMBOL(EntangleJaxReadSlotCuda,
                              entangle_jax::ReadSlot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attrs());
