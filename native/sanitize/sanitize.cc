#include "sanitize.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace entangle_jax::sanitize {
namespace {

// What one trampoline forwards to.
struct Binding {
  std::atomic<XLA_FFI_Handler*> original{nullptr};
  int32_t object_operand = -1;
  bool host = false;  // operand data is host memory (readable here)
};

std::array<Binding, kMaxWrapped> bindings;
std::atomic<int> next_binding{0};
std::atomic<bool> recording{false};

// Each thread's published call in flight (CallsInFlight): a slot of
// atomics that only its thread writes. `start_ns` is the slot's sequence:
// 0 while no call is in flight; the trampoline writes the other fields,
// then the start (release), and stores 0 when the handler returns. A
// reader loads the start (acquire), the fields, then the start again after
// an acquire fence: the same nonzero start means the fields are that
// call's (a later call's stores come after a release fence that follows
// the store of 0). A relaxed store and a release store as a call begins,
// a relaxed store as it ends: plain moves on x86.
struct alignas(64) Slot {
  std::atomic<bool> taken{false};
  std::atomic<int64_t> thread{0};
  std::atomic<int64_t> start_ns{0};
  std::atomic<uint64_t> where{0};  // Where(): site, wrapped and device
};

// A call's site, wrapped handler and device in one word, so that
// publishing it is one store: the site + 1 in bits 0-39 (0: none; a site
// past 2^40 - 2, which no process makes, reads as none), the wrapped index
// in bits 40-49 (kMaxWrapped is 1024), the device + 1 in bits 50-63 (0:
// not known; an ordinal past 16382 reads as not known).
constexpr uint64_t kSiteBits = 40;
constexpr uint64_t kWrappedBits = 10;
static_assert(kMaxWrapped <= (1 << kWrappedBits));

uint64_t Where(int64_t site, int32_t wrapped, int32_t device) {
  constexpr uint64_t kSiteMask = (uint64_t{1} << kSiteBits) - 1;
  constexpr uint64_t kDeviceMask =
      (uint64_t{1} << (64 - kSiteBits - kWrappedBits)) - 1;
  const uint64_t s = static_cast<uint64_t>(site + 1);
  const uint64_t d = static_cast<uint64_t>(static_cast<int64_t>(device) + 1);
  return (s <= kSiteMask ? s : 0) |
         (static_cast<uint64_t>(wrapped) << kSiteBits) |
         ((d <= kDeviceMask ? d : 0) << (kSiteBits + kWrappedBits));
}

std::array<Slot, kMaxThreads> slots;
std::atomic<int> slots_high{0};  // slots below it have been taken once

// A free slot for the calling thread, or nullptr when every one is taken.
Slot* ClaimSlot() {
  for (int i = 0; i < kMaxThreads; ++i) {
    bool expected = false;
    if (slots[i].taken.compare_exchange_strong(expected, true,
                                               std::memory_order_acquire)) {
      slots[i].thread.store(static_cast<int64_t>(syscall(SYS_gettid)),
                            std::memory_order_relaxed);
      int high = slots_high.load(std::memory_order_relaxed);
      while (high < i + 1 && !slots_high.compare_exchange_weak(
                                 high, i + 1, std::memory_order_release)) {
      }
      return &slots[i];
    }
  }
  return nullptr;
}

// Gives a thread's slot back when the thread ends (XLA's pools keep their
// threads; Python threads come and go).
class SlotRelease {
 public:
  explicit SlotRelease(Slot* slot) : slot_(slot) {}
  ~SlotRelease() {
    if (slot_ == nullptr) return;
    slot_->start_ns.store(0, std::memory_order_relaxed);
    slot_->taken.store(false, std::memory_order_release);
  }
  SlotRelease(const SlotRelease&) = delete;
  SlotRelease& operator=(const SlotRelease&) = delete;

 private:
  Slot* slot_;
};

// Per-thread logs: a thread appends to its own. Each log holds up to a
// million records between two drains, its chunks allocated as it first
// fills them; Drain copies them out, starts the log again at 0 and frees
// every chunk, so a block's memory is returned when it ends. A log's flag
// (`busy`) is taken by its thread for each append and by Drain, so Drain
// never frees a chunk an append is writing: uncontended, it is one atomic
// exchange on a line only that thread touches between drains.
constexpr int64_t kChunk = 4096;
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kCapacity = kChunk * kMaxChunks;

struct ThreadLog {
  int64_t thread = 0;
  Slot* slot = nullptr;  // where its call in flight is published; none:
                         // every slot was taken when it began
  std::atomic<bool> busy{false};
  int64_t count = 0;  // records held (guarded by busy)
  std::array<Record*, kMaxChunks> chunks{};
  int64_t dropped = 0;
  // Values past kMaxValues of the records that had more (guarded by busy).
  std::vector<uint8_t> overflow_operand;
  std::vector<int64_t> overflow_values;
};

// A call's values past kMaxValues, gathered before its record is
// appended (only calls with that many values touch them).
thread_local std::vector<uint8_t> pending_operand;
thread_local std::vector<int64_t> pending_values;

class Holding {
 public:
  explicit Holding(ThreadLog* log) : log_(log) {
    while (log_->busy.exchange(true, std::memory_order_acquire)) {
    }
  }
  ~Holding() { log_->busy.store(false, std::memory_order_release); }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;

 private:
  ThreadLog* log_;
};

std::mutex registry_mutex;
// Never freed: a thread's log outlives it, so that Drain still reads it.
std::vector<ThreadLog*>& Registry() {
  static auto* registry = new std::vector<ThreadLog*>();
  return *registry;
}

// The calling thread's log (one trivial thread-local load a call; the
// first call of a thread makes it and takes the thread's slot).
ThreadLog* MyLog() {
  thread_local ThreadLog* log = nullptr;
  if (log == nullptr) {
    auto* made = new ThreadLog();
    made->thread = static_cast<int64_t>(syscall(SYS_gettid));
    made->slot = ClaimSlot();
    // Constructed here once, destroyed when the thread ends.
    thread_local SlotRelease release(made->slot);
    std::lock_guard<std::mutex> lock(registry_mutex);
    Registry().push_back(made);
    log = made;
  }
  return log;
}

void Append(ThreadLog* log, const Record& record) {
  Holding hold(log);
  const int64_t n = log->count;
  if (n >= kCapacity) {
    ++log->dropped;
    return;
  }
  Record*& records = log->chunks[n / kChunk];
  if (records == nullptr) records = new Record[kChunk];
  records[n % kChunk] = record;
  if (!pending_values.empty()) {
    records[n % kChunk].overflow =
        static_cast<int64_t>(log->overflow_values.size());
    log->overflow_operand.insert(log->overflow_operand.end(),
                                 pending_operand.begin(),
                                 pending_operand.end());
    log->overflow_values.insert(log->overflow_values.end(),
                                pending_values.begin(), pending_values.end());
  }
  log->count = n + 1;
}

bool IsSiteName(const XLA_FFI_ByteSpan* name) {
  constexpr size_t kLength = sizeof(kSiteAttribute) - 1;
  return name != nullptr && name->len == kLength &&
         std::memcmp(name->ptr, kSiteAttribute, kLength) == 0;
}

// The extension list's element type by what the frame holds: FFI API 0.4
// renamed XLA_FFI_Extension_Base to XLA_FFI_InternalExtension (same
// fields), and a workspace may build this against either header.
using ExtensionBase =
    std::remove_pointer_t<decltype(XLA_FFI_CallFrame::extension_start)>;

bool IsMetadataQuery(const XLA_FFI_CallFrame* frame) {
  for (const ExtensionBase* e = frame->extension_start; e != nullptr;
       e = e->next) {
    if (e->type == XLA_FFI_Extension_Metadata) return true;
  }
  return false;
}

constexpr size_t kMaxFrameBytes = 1024;
constexpr int64_t kMaxAttrs = 64;

// The site attribute's index among the frame's attributes (-1: none), and
// its value through `site` (-1 when absent or not an S64 scalar).
int64_t FindSite(const XLA_FFI_CallFrame* frame, int64_t* site) {
  *site = -1;
  const XLA_FFI_Attrs& attrs = frame->attrs;
  for (int64_t i = 0; i < attrs.size; ++i) {
    if (!IsSiteName(attrs.names[i])) continue;
    if (attrs.types[i] == XLA_FFI_AttrType_SCALAR) {
      const auto* scalar = static_cast<const XLA_FFI_Scalar*>(attrs.attrs[i]);
      if (scalar->dtype == XLA_FFI_DataType_S64) {
        *site = *static_cast<const int64_t*>(scalar->value);
      }
    }
    return i;
  }
  return -1;
}

// Calls `original` with `frame` minus its attribute `found` (the site's,
// FindSite; -1: none, the frame goes as it is). The frame is copied with
// the size XLA gives it (a newer XLA may append fields), and what the
// handler writes into the copy (its future) is copied back.
XLA_FFI_Error* Forward(XLA_FFI_Handler* original, XLA_FFI_CallFrame* frame,
                       int64_t found) {
  const XLA_FFI_Attrs& attrs = frame->attrs;
  if (found < 0 || attrs.size > kMaxAttrs ||
      frame->struct_size > kMaxFrameBytes) {
    return original(frame);
  }
  // The attributes stay sorted by name with one taken out.
  std::array<XLA_FFI_AttrType, kMaxAttrs> types;
  std::array<XLA_FFI_ByteSpan*, kMaxAttrs> names;
  std::array<void*, kMaxAttrs> values;
  int64_t kept = 0;
  for (int64_t i = 0; i < attrs.size; ++i) {
    if (i == found) continue;
    types[kept] = attrs.types[i];
    names[kept] = attrs.names[i];
    values[kept] = attrs.attrs[i];
    ++kept;
  }
  alignas(std::max_align_t) unsigned char bytes[kMaxFrameBytes];
  const size_t size = frame->struct_size;
  std::memcpy(bytes, frame, size);
  auto* copy = reinterpret_cast<XLA_FFI_CallFrame*>(bytes);
  copy->attrs.size = kept;
  copy->attrs.types = types.data();
  copy->attrs.names = names.data();
  copy->attrs.attrs = values.data();
  XLA_FFI_Error* error = original(copy);
  const XLA_FFI_Attrs original_attrs = frame->attrs;
  std::memcpy(frame, bytes, size);
  frame->attrs = original_attrs;
  return error;
}

bool IsInteger(XLA_FFI_DataType dtype) {
  switch (dtype) {
    case XLA_FFI_DataType_S8:
    case XLA_FFI_DataType_S16:
    case XLA_FFI_DataType_S32:
    case XLA_FFI_DataType_S64:
    case XLA_FFI_DataType_U8:
    case XLA_FFI_DataType_U16:
    case XLA_FFI_DataType_U32:
    case XLA_FFI_DataType_U64:
      return true;
    default:
      return false;
  }
}

int64_t Element(const void* data, XLA_FFI_DataType dtype, int64_t i) {
  switch (dtype) {
    case XLA_FFI_DataType_S8:
      return static_cast<const int8_t*>(data)[i];
    case XLA_FFI_DataType_S16:
      return static_cast<const int16_t*>(data)[i];
    case XLA_FFI_DataType_S32:
      return static_cast<const int32_t*>(data)[i];
    case XLA_FFI_DataType_U8:
      return static_cast<const uint8_t*>(data)[i];
    case XLA_FFI_DataType_U16:
      return static_cast<const uint16_t*>(data)[i];
    case XLA_FFI_DataType_U32:
      return static_cast<const uint32_t*>(data)[i];
    default:  // S64, U64 (as its bits)
      return static_cast<const int64_t*>(data)[i];
  }
}

// The declared object operand's values; for a target declared with none,
// every small integer operand's (words for the report only: such a call
// may touch any object). In operand order, as many as a record holds.
void RecordValues(const Binding& binding, const XLA_FFI_CallFrame* frame,
                  Record* record) {
  record->n_values = 0;
  record->truncated = 0;
  record->overflow = -1;
  pending_operand.clear();
  pending_values.clear();
  if (!binding.host) return;
  const XLA_FFI_Args& args = frame->args;
  for (int64_t i = 0; i < args.size; ++i) {
    if (args.types[i] != XLA_FFI_ArgType_BUFFER) continue;
    if (binding.object_operand >= 0 && i != binding.object_operand) continue;
    const auto* buffer = static_cast<const XLA_FFI_Buffer*>(args.args[i]);
    if (!IsInteger(buffer->dtype) || buffer->data == nullptr) continue;
    int64_t elements = 1;
    for (int64_t d = 0; d < buffer->rank; ++d) elements *= buffer->dims[d];
    if (elements > kSmallOperand && i != binding.object_operand) continue;
    for (int64_t k = 0; k < elements; ++k) {
      if (record->n_values == kMaxTotalValues) {
        record->truncated = 1;
        return;
      }
      const int64_t value = Element(buffer->data, buffer->dtype, k);
      if (record->n_values < kMaxValues) {
        record->operand[record->n_values] = static_cast<uint8_t>(i);
        record->values[record->n_values] = value;
      } else {
        pending_operand.push_back(static_cast<uint8_t>(i));
        pending_values.push_back(value);
      }
      ++record->n_values;
    }
  }
}

int64_t RunIdOf(const XLA_FFI_CallFrame* frame) {
  const XLA_FFI_Api* api = frame->api;
  if (api == nullptr ||
      api->struct_size < XLA_FFI_STRUCT_SIZE(XLA_FFI_Api, XLA_FFI_RunId_Get) ||
      api->XLA_FFI_RunId_Get == nullptr) {
    return 0;
  }
  XLA_FFI_RunId_Get_Args args;
  args.struct_size = XLA_FFI_RunId_Get_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = frame->ctx;
  args.run_id = 0;
  XLA_FFI_Error* error = api->XLA_FFI_RunId_Get(&args);
  if (error != nullptr) {
    XLA_FFI_Error_Destroy_Args destroy;
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.extension_start = nullptr;
    destroy.error = error;
    api->XLA_FFI_Error_Destroy(&destroy);
    return 0;
  }
  return args.run_id;
}

int32_t DeviceOrdinalOf(const XLA_FFI_CallFrame* frame) {
  const XLA_FFI_Api* api = frame->api;
  if (api == nullptr ||
      api->struct_size <
          XLA_FFI_STRUCT_SIZE(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) ||
      api->XLA_FFI_DeviceOrdinal_Get == nullptr) {
    return -1;
  }
  XLA_FFI_DeviceOrdinal_Get_Args args;
  args.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = frame->ctx;
  args.device_ordinal = -1;
  XLA_FFI_Error* error = api->XLA_FFI_DeviceOrdinal_Get(&args);
  if (error != nullptr) {
    XLA_FFI_Error_Destroy_Args destroy;
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.extension_start = nullptr;
    destroy.error = error;
    api->XLA_FFI_Error_Destroy(&destroy);
    return -1;
  }
  return args.device_ordinal;
}

XLA_FFI_Error* Run(int index, XLA_FFI_CallFrame* frame) {
  const Binding& binding = bindings[index];
  XLA_FFI_Handler* original = binding.original.load(std::memory_order_acquire);
  int64_t site;
  const int64_t found = FindSite(frame, &site);
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE ||
      !recording.load(std::memory_order_relaxed) || IsMetadataQuery(frame)) {
    return Forward(original, frame, found);
  }
  Record record;
  record.start_ns = NowNs();
  record.wrapped = index;
  record.run_id = RunIdOf(frame);
  record.device = DeviceOrdinalOf(frame);
  record.reserved = 0;
  RecordValues(binding, frame, &record);
  ThreadLog* log = MyLog();
  Slot* slot = log->slot;
  if (slot != nullptr) {
    // Orders this thread's last store of 0 before the fields (see Slot).
    std::atomic_thread_fence(std::memory_order_release);
    slot->where.store(Where(site, index, record.device),
                      std::memory_order_relaxed);
    slot->start_ns.store(record.start_ns, std::memory_order_release);
  }
  XLA_FFI_Error* error = Forward(original, frame, found);
  if (slot != nullptr) slot->start_ns.store(0, std::memory_order_relaxed);
  record.end_ns = NowNs();
  record.site = site;
  record.failed = error != nullptr;
  Append(log, record);
  return error;
}

void DescribeExecution(XLA_FFI_CallFrame* frame) {
  for (ExtensionBase* e = frame->extension_start; e != nullptr; e = e->next) {
    if (e->type != XLA_FFI_Extension_Metadata) continue;
    XLA_FFI_Metadata* metadata =
        reinterpret_cast<XLA_FFI_Metadata_Extension*>(e)->metadata;
    metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    metadata->api_version.extension_start = nullptr;
    metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    metadata->traits = 0;
  }
}

template <int I>
XLA_FFI_Error* Trampoline(XLA_FFI_CallFrame* frame) {
  return Run(I, frame);
}

template <size_t... I>
constexpr std::array<XLA_FFI_Handler*, sizeof...(I)> Trampolines(
    std::index_sequence<I...>) {
  return {&Trampoline<static_cast<int>(I)>...};
}

constexpr std::array<XLA_FFI_Handler*, kMaxWrapped> kTrampolines =
    Trampolines(std::make_index_sequence<kMaxWrapped>{});

}  // namespace

XLA_FFI_Error* Execution(XLA_FFI_CallFrame* frame) {
  if (IsMetadataQuery(frame)) {
    DescribeExecution(frame);
    return nullptr;
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return nullptr;
  if (frame->rets.size < 1 || frame->rets.types[0] != XLA_FFI_RetType_BUFFER) {
    return nullptr;
  }
  auto* out = static_cast<XLA_FFI_Buffer*>(frame->rets.rets[0]);
  if (out->dtype != XLA_FFI_DataType_S64 || out->data == nullptr ||
      out->rank != 0) {
    return nullptr;
  }
  *static_cast<int64_t*>(out->data) = RunIdOf(frame);
  return nullptr;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

XLA_FFI_Handler* Wrap(XLA_FFI_Handler* original, int32_t object_operand,
                      bool host, int32_t* index) {
  const int i = next_binding.fetch_add(1);
  if (i >= kMaxWrapped) {
    next_binding.store(kMaxWrapped);
    return nullptr;
  }
  bindings[i].object_operand = object_operand;
  bindings[i].host = host;
  bindings[i].original.store(original, std::memory_order_release);
  *index = i;
  return kTrampolines[i];
}

void SetRecording(bool on) {
  recording.store(on, std::memory_order_seq_cst);
}

Drained Drain() {
  Drained out;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (ThreadLog* log : Registry()) {
    std::array<Record*, kMaxChunks> chunks;
    std::vector<uint8_t> operands;
    std::vector<int64_t> values;
    int64_t count;
    {
      // Take the log's chunks and start it again; copy them out after
      // letting go, so that its thread waits only for the swap.
      Holding hold(log);
      count = log->count;
      chunks = log->chunks;
      log->chunks.fill(nullptr);
      log->count = 0;
      out.dropped += log->dropped;
      log->dropped = 0;
      operands.swap(log->overflow_operand);
      values.swap(log->overflow_values);
    }
    const auto base = static_cast<int64_t>(out.overflow_values.size());
    out.records.reserve(out.records.size() + static_cast<size_t>(count));
    for (int64_t n = 0; n < count; ++n) {
      ThreadRecord t{log->thread, chunks[n / kChunk][n % kChunk]};
      if (t.record.overflow >= 0) t.record.overflow += base;
      out.records.push_back(t);
    }
    for (Record* records : chunks) delete[] records;
    out.overflow_operand.insert(out.overflow_operand.end(), operands.begin(),
                                operands.end());
    out.overflow_values.insert(out.overflow_values.end(), values.begin(),
                               values.end());
  }
  return out;
}

Drained Peek() {
  Drained out;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (ThreadLog* log : Registry()) {
    // Copied while holding the log: its thread's next append waits, once.
    Holding hold(log);
    const auto base = static_cast<int64_t>(out.overflow_values.size());
    for (int64_t n = 0; n < log->count; ++n) {
      ThreadRecord t{log->thread, log->chunks[n / kChunk][n % kChunk]};
      if (t.record.overflow >= 0) t.record.overflow += base;
      out.records.push_back(t);
    }
    out.dropped += log->dropped;
    out.overflow_operand.insert(out.overflow_operand.end(),
                                log->overflow_operand.begin(),
                                log->overflow_operand.end());
    out.overflow_values.insert(out.overflow_values.end(),
                               log->overflow_values.begin(),
                               log->overflow_values.end());
  }
  return out;
}

std::vector<InFlight> CallsInFlight() {
  std::vector<InFlight> out;
  const int high = slots_high.load(std::memory_order_acquire);
  for (int i = 0; i < high; ++i) {
    const Slot& slot = slots[i];
    // A few tries: a thread that keeps starting short calls may change
    // its slot under each read; such a thread is not hung.
    for (int attempt = 0; attempt < 4; ++attempt) {
      const int64_t start = slot.start_ns.load(std::memory_order_acquire);
      if (start == 0) break;
      InFlight call;
      call.thread = slot.thread.load(std::memory_order_relaxed);
      const uint64_t where = slot.where.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.start_ns.load(std::memory_order_relaxed) != start) continue;
      call.start_ns = start;
      call.site =
          static_cast<int64_t>(where & ((uint64_t{1} << kSiteBits) - 1)) - 1;
      call.wrapped = static_cast<int32_t>((where >> kSiteBits) &
                                          ((uint64_t{1} << kWrappedBits) - 1));
      call.device =
          static_cast<int32_t>(where >> (kSiteBits + kWrappedBits)) - 1;
      out.push_back(call);
      break;
    }
  }
  return out;
}

}  // namespace entangle_jax::sanitize
