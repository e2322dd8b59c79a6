// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/grace_period.h"

#include "alloc/rcu.h"

namespace norefs::alloc {

void GracePeriods::synchronize() {
  std::uint64_t s = begin();
  rcu::synchronize();
  end(s);
}

void GracePeriods::end(std::uint64_t s) {
  std::uint64_t done = h_.gp_completed.load(std::memory_order_relaxed);
  // Release pairs with the acquire in poll(); relaxed on failure: we only
  // retry or stop, publishing nothing.
  while (done < s && !h_.gp_completed.compare_exchange_weak(done, s, std::memory_order_release,
                                                            std::memory_order_relaxed)) {
  }
  // Several writers (the driver, the expedite worker): an RMW,
  // once per grace period, off the hot path.
  h_.grace_periods.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace norefs::alloc
