// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/grace_period.h — grace-period cookies over liburcu 0.13.
//
// liburcu 0.13 has no start_poll/poll_state API (it arrived in 0.14, built on
// call_rcu's 10 ms cadence).  This is the userspace form of the kernel's
// get_state_synchronize_rcu()/poll_state_synchronize_rcu(): two counters
// around rcu::synchronize().
//
//   started:   grace periods begun.  synchronize() bumps it (RMW) before it
//              calls rcu::synchronize().
//   completed: the highest s such that grace period s has ended.  Raised with
//              a CAS-max, because the pool's driver and its expedite worker may
//              both be in synchronize() and finish in either order.
//
// cookie() = started + 1, taken with an RMW.  poll(cookie) is true once
// completed >= cookie, i.e. once a grace period that began after cookie() was
// taken has ended.  Whatever the caller did before cookie() (unlinking a page
// from an index, queueing it) therefore happens before that grace period
// began, so every reader that could have found the page has left its
// read-side section.  A page stamped with a cookie waits one grace period if
// none is running, and at most two if one is (the running one may have
// started its reader scan before the page was unlinked).
//
// Memory ordering, the chain the guarantee rests on:
//   unlink store -> (program order / slot lock) -> cookie(): fetch_add(0,
//   release) on `started` -> synchronize(): fetch_add(1, acq_rel) on `started`
//   reads our value or a later one in our release sequence, so our release
//   synchronizes with its acquire -> rcu::synchronize() (liburcu: full
//   membarrier, then waits for every reader that began before) -> CAS-max of
//   `completed` (release) -> poll(): load (acquire) -> free.
// cookie() is an RMW rather than a load for exactly that first link: a load
// that reads `started` does not synchronize with the writer that later bumps
// it.  It costs one contended RMW per batch, not per page.
#pragma once

#include <cstdint>

#include "alloc/stats_block.h"

namespace norefs::alloc {

class GracePeriods {
 public:
  // The counters live in the stats block so that readers can see them.
  explicit GracePeriods(StatsHeader& h) : h_(h) {}

  std::uint64_t cookie() { return h_.gp_started.fetch_add(0, std::memory_order_release) + 1; }
  bool poll(std::uint64_t cookie) const {
    // Acquire pairs with the release CAS in synchronize(): the grace period
    // happens before whatever the caller frees next.
    return h_.gp_completed.load(std::memory_order_acquire) >= cookie;
  }
  std::uint64_t completed() const { return h_.gp_completed.load(std::memory_order_acquire); }
  std::uint64_t started() const { return h_.gp_started.load(std::memory_order_relaxed); }

  // Runs one grace period (shared with concurrent callers by liburcu) and
  // publishes its number: end(begin()) around rcu::synchronize().
  // Context: as rcu::synchronize().
  void synchronize();

 private:
  // Numbers the grace period about to begin.
  std::uint64_t begin() {
    // acq_rel: acquire takes in every cookie() taken before (their release
    // sequences); release orders our own earlier stores for the same reason.
    return h_.gp_started.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  // Publishes that grace period `s` has ended.
  void end(std::uint64_t s);

  StatsHeader& h_;
};

}  // namespace norefs::alloc
