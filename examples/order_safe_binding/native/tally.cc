// The tally library (tally.h). Every function may be called from several
// threads at once: XLA:CPU runs independent calls concurrently, so one lock
// guards the table.
#include "tally.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace tally {
namespace {

std::mutex table_lock;
std::unordered_map<int32_t, float> table;
int32_t last_handle = 0;
std::atomic<int64_t> query_delay_us{0};

}  // namespace

int32_t Create(float initial) {
  std::lock_guard<std::mutex> hold(table_lock);
  int32_t handle = ++last_handle;
  table[handle] = initial;
  return handle;
}

bool Add(int32_t handle, float amount) {
  std::lock_guard<std::mutex> hold(table_lock);
  auto found = table.find(handle);
  if (found == table.end()) return false;
  found->second += amount;
  return true;
}

bool Get(int32_t handle, float* value) {
  // The delay comes before the lock and the read: a write that nothing
  // orders after this query can land in between.
  int64_t delay = query_delay_us.load();
  if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
  std::lock_guard<std::mutex> hold(table_lock);
  auto found = table.find(handle);
  if (found == table.end()) return false;
  *value = found->second;
  return true;
}

bool Destroy(int32_t handle) {
  std::lock_guard<std::mutex> hold(table_lock);
  return table.erase(handle) == 1;
}

int64_t LiveCount() {
  std::lock_guard<std::mutex> hold(table_lock);
  return static_cast<int64_t>(table.size());
}

void SetQueryDelay(int64_t microseconds) { query_delay_us = microseconds; }

}  // namespace tally
