// tally: a small native library with state behind integer handles, as
// solvers, renderers and communicators keep theirs. Each handle names one
// accumulator (a float) that lives in the library until destroyed. It knows
// nothing of JAX; native/tally_ffi.cc adapts it to the XLA FFI.
#ifndef TALLY_H_
#define TALLY_H_

#include <cstdint>

namespace tally {

// A new accumulator holding `initial`; its handle (never 0, never reused).
int32_t Create(float initial);

// Adds `amount` to the accumulator `handle`; false if there is none.
bool Add(int32_t handle, float amount);

// The value of the accumulator `handle`, after the query delay (see
// SetQueryDelay); false if there is none.
bool Get(int32_t handle, float* value);

// Frees the accumulator `handle`; false if there is none.
bool Destroy(int32_t handle);

// How many accumulators exist now.
int64_t LiveCount();

// Makes every Get wait `microseconds` before it reads: a slow query, for
// tests that show what happens when nothing orders a later Add after it.
void SetQueryDelay(int64_t microseconds);

}  // namespace tally

#endif  // TALLY_H_
