// The run-time sanitizer's recording trampolines (entangle_jax.testing.
// sanitize): each wraps one FFI handler that a library registers while the
// sanitizer is active, records every call it executes into a per-thread log,
// and calls the original handler with the same call frame, at every stage.
//
// Written against the XLA FFI C API only (xla/ffi/api/c_api.h): the call
// frame's arguments, attributes and the RunId query.
#ifndef ENTANGLE_JAX_NATIVE_SANITIZE_SANITIZE_H_
#define ENTANGLE_JAX_NATIVE_SANITIZE_SANITIZE_H_

#include <cstdint>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace entangle_jax::sanitize {

// How many handlers (stages of targets) one process can wrap.
inline constexpr int kMaxWrapped = 1024;

// The most operand values one record holds in place; more go to its log's
// overflow store, up to kMaxTotalValues a call.
inline constexpr int kMaxValues = 16;
inline constexpr int kMaxTotalValues = 4096;

// Integer operands of at most this many elements are recorded whole.
inline constexpr int64_t kSmallOperand = 8;

// The attribute the sanitizer adds to each custom call it lowers (the call's
// place in its program), stripped before the original handler sees the call.
inline constexpr char kSiteAttribute[] = "entangle_jax_sanitize_site";

// The target of the execution op the sanitizer adds to a function of a
// module it compiles (on CPU) whose host callbacks it records: it writes XLA's
// RunId of the execution into its one S64 scalar result, which each host
// callback takes as one more operand, so that the callback's Python recorder
// knows which execution it ran in.
inline constexpr char kExecutionTarget[] = "entangle_jax_sanitize_execution";

// The execution op's handler (kExecutionTarget).
XLA_FFI_Error* Execution(XLA_FFI_CallFrame* frame);

// One executed call, as the trampoline saw it.
struct Record {
  int64_t start_ns;  // steady clock, when the trampoline was entered
  int64_t end_ns;    // when the original handler returned
  int64_t site;      // the site attribute's value; -1 when absent
  int64_t run_id;    // XLA's RunId of the execution; 0 when unknown
  int32_t wrapped;   // which wrapped handler (Wrap's return value)
  int32_t failed;    // the handler returned an error
  int32_t n_values;   // all values recorded, in place and in overflow
  int32_t truncated;  // some operand values did not fit (kMaxTotalValues)
  int32_t device;     // XLA's device ordinal of the call; -1 when unknown
  int32_t reserved;
  int64_t overflow;   // where values past kMaxValues start in the drain's
                      // overflow arrays; -1 when none
  uint8_t operand[kMaxValues];
  int64_t values[kMaxValues];
};

// A record and the thread that made it.
struct ThreadRecord {
  int64_t thread;  // the OS thread id
  Record record;
};

// Binds the next free trampoline to `original`. `object_operand` (-1: none
// declared) is the one operand recorded (up to kMaxTotalValues elements)
// whatever its size; with none declared, integer operands of at most
// kSmallOperand elements are recorded (for the report's words).
// `host`: the operands are host memory (on CPU), so their values are read;
// else no values are recorded. Returns the trampoline and its index, or
// nullptr when all are in use.
XLA_FFI_Handler* Wrap(XLA_FFI_Handler* original, int32_t object_operand,
                      bool host, int32_t* index);

// Starts or stops recording (the trampolines stay registered either way).
void SetRecording(bool on);

// What Drain hands back: the records, in no particular order, and the
// values past kMaxValues of the records that had more (each record's
// `overflow` indexes these).
struct Drained {
  std::vector<ThreadRecord> records;
  std::vector<uint8_t> overflow_operand;
  std::vector<int64_t> overflow_values;
  int64_t dropped = 0;  // calls a full log could not hold
};

// The records made since the last Drain. Each log starts again empty and
// its memory is freed.
Drained Drain();

// The records made since the last Drain, copied: the logs keep them (for
// the watchdog, which reports a hang while the block that will drain them
// has not ended).
Drained Peek();

// How many threads can publish the call they are in at once (a thread past
// it runs its calls recorded, but not published).
inline constexpr int kMaxThreads = 4096;

// A call a thread is in now: published by the trampoline while recording,
// from just before the original handler is called until it returns.
struct InFlight {
  int64_t thread;    // the OS thread id
  int64_t start_ns;  // when the trampoline was entered (NowNs's clock)
  int64_t site;      // the site attribute's value; -1 when absent
  int32_t wrapped;   // which wrapped handler
  int32_t device;    // XLA's device ordinal; -1 when unknown
};

// The calls in flight now, one a thread at most, read without a lock
// (each thread's slot is a sequence of atomics that the reader checks
// again after reading, so a call that ends meanwhile is not torn).
std::vector<InFlight> CallsInFlight();

// The steady clock the records use, in nanoseconds.
int64_t NowNs();

}  // namespace entangle_jax::sanitize

#endif  // ENTANGLE_JAX_NATIVE_SANITIZE_SANITIZE_H_
