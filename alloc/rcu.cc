// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/rcu.h"

#include <urcu/call-rcu.h>

#include <atomic>
#include <type_traits>

#include "alloc/reader_registry.h"

namespace norefs::alloc::rcu {
namespace detail {

constinit thread_local bool registered = false;
#ifdef NOREFS_TSAN
char tsan_gp_sync;
#endif

namespace {
// Unregisters at thread exit.  Constructed only on the slow path, so the
// inline fast path tests a trivially destructible bool.
struct Registration {
  Registration() { urcu_memb_register_thread(); }
  ~Registration() {
    urcu_memb_unregister_thread();
    registered = false;
  }
};
}  // namespace

void register_slow() {
  // liburcu's own threads (the call_rcu worker, which runs our callbacks)
  // register themselves; registering again would trip its assertion.
  if (URCU_TLS(urcu_memb_reader).registered) {
    registered = true;
    return;
  }
  thread_local Registration registration;
  registered = true;
}

}  // namespace detail

namespace {

// The registry that covers other processes' readers, or nullptr.  A reader
// in another process can only reach what it finds after the registry exists
// (it attaches to the registry's fd first).  The seq_cst fence orders the
// caller's unlink before this load; process_registry() publishes with a
// seq_cst store.  So if the load misses a registry created concurrently,
// that store, and every reader registering after it, follows the fence, and
// the reader's registration fence makes it see the unlink.
ReaderRegistry* registry() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return process_registry_if_created();
}

static_assert(std::is_standard_layout_v<Head>, "urcu is at the Head's address");

// What liburcu runs for every call(): the registry's grace period (shared by
// the batch: most callbacks find their cookie polled), then the caller's.
void run_callback(rcu_head* urcu) {
  Head* head = reinterpret_cast<Head*>(urcu);  // urcu is Head's first member
#ifdef NOREFS_TSAN
  __tsan_acquire(head);  // pairs with the release in call(): func and the cookie
#endif
  if (head->registry_cookie != 0) {
    // Non-null: a cookie was taken from it, and it is never destroyed.
    process_registry_if_created()->synchronize_for(head->registry_cookie);
  }
  head->func(head);
}

}  // namespace

void synchronize() {
  urcu_memb_synchronize_rcu();
  if (ReaderRegistry* r = registry()) r->synchronize();
#ifdef NOREFS_TSAN
  __tsan_acquire(&detail::tsan_gp_sync);
#endif
}

void call(Head* head, void (*func)(Head*)) {
  register_thread();
  head->func = func;
  // The cookie after the caller's unlink (the fence in registry()): the
  // registry grace period it waits for began after the unlink.
  ReaderRegistry* r = registry();
  head->registry_cookie = r != nullptr ? r->cookie() : 0;
#ifdef NOREFS_TSAN
  __tsan_release(head);  // pairs with the acquires in run_callback() and callback_begins()
#endif
  urcu_memb_call_rcu(&head->urcu, run_callback);
}

void barrier() {
  register_thread();
  urcu_memb_barrier();
}

}  // namespace norefs::alloc::rcu
