// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/rcu.h"

#include <urcu/call-rcu.h>

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

void synchronize() {
  urcu_memb_synchronize_rcu();
#ifdef NOREFS_TSAN
  __tsan_acquire(&detail::tsan_gp_sync);
#endif
}

void call(Head* head, void (*func)(Head*)) {
  register_thread();
#ifdef NOREFS_TSAN
  __tsan_release(head);  // pairs with the acquire in callback_begins()
#endif
  urcu_memb_call_rcu(head, func);
}

void barrier() {
  register_thread();
  urcu_memb_barrier();
}

}  // namespace norefs::alloc::rcu
