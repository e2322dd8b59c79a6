// SPDX-License-Identifier: LGPL-2.1-or-later
#include "cache/sync_point.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>

namespace norefs::cache::sync_point {
namespace {

std::mutex mu;
std::map<std::string, std::function<void()>, std::less<>> points;  // guarded by mu
// Relaxed: only a hint that skips the lock when nothing is armed; set()
// happens before the code under test starts (thread creation orders it).
std::atomic<bool> armed{false};

}  // namespace

#ifdef NOREFS_SYNC_POINTS
void hit(std::string_view name) {
  if (!armed.load(std::memory_order_relaxed)) return;
  std::function<void()> fn;
  {
    std::lock_guard lk(mu);
    auto it = points.find(name);
    if (it == points.end()) return;
    fn = it->second;
  }
  fn();
}
#endif

void set(std::string_view name, std::function<void()> fn) {
  std::lock_guard lk(mu);
  points.insert_or_assign(std::string(name), std::move(fn));
  armed.store(true, std::memory_order_relaxed);
}

void clear() {
  std::lock_guard lk(mu);
  points.clear();
  armed.store(false, std::memory_order_relaxed);
}

}  // namespace norefs::cache::sync_point
