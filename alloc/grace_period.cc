// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/grace_period.h"

#include "alloc/rcu.h"

namespace norefs::alloc {

void GracePeriods::synchronize() {
  // acq_rel: acquire takes in every cookie() taken before (their release
  // sequences); release orders our own earlier stores for the same reason.
  std::uint64_t s = h_.gp_started.fetch_add(1, std::memory_order_acq_rel) + 1;
  rcu::synchronize();
  std::uint64_t done = h_.gp_completed.load(std::memory_order_relaxed);
  // Release pairs with the acquire in poll(); relaxed on failure: we only
  // retry or stop, publishing nothing.
  while (done < s &&
         !h_.gp_completed.compare_exchange_weak(done, s, std::memory_order_release,
                                                std::memory_order_relaxed)) {
  }
  // Several writers (driver, expedite worker): an RMW, off the hot path.
  h_.grace_periods.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace norefs::alloc
