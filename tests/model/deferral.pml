/* SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * tests/model/deferral.pml: a Promela model of norefs's deferred-free
 * ordering, checked exhaustively with spin (tests/model/run_spin.sh,
 * docs/model-check.md).
 *
 * The property (design.md, "Page lifecycle" 6): the memory of a page found in
 * an index under rcu_read_lock() is not reused before that reader's
 * rcu_read_unlock().  It is the readers' assertions on poisoned[]: at each
 * step of a copy, and just before each rcu_read_unlock() for every page the
 * section found.
 *
 * What each process stands for (file:function of the code it models):
 *   Remover    the slot owner removing pages: cache/page_cache.cc
 *              remove_locked() (index erase, set_rcu_free) + free_removed()
 *              (pg::put of the cache's reference, PagePool::free), or evict()
 *              (pg::freeze, erase, set_rcu_free, free).
 *   Driver     alloc/page_pool.cc Impl::driver_main(): GracePeriods::
 *              synchronize() when gp_requested > completed, and sweep()
 *              (free a batch whose cookie completed, cut pending behind it).
 *   Expedite   alloc/page_pool.cc Impl::expedite_main(): takes a slot's
 *              pending list under the slot lock, synchronize(), frees it.
 *   Reader     cache/read_loop.cc PageCache::fast_locked() under
 *              rcu::ReadGuard: lookup, copy with no reference, unlock.
 *   RefReader  cache/read_loop.cc get_page() + slow_page(): lookup, try_get,
 *              re-lookup (put inside the section if the page went), copy
 *              outside the section, put; its last put frees on its own slot.
 *   RemoteReader  (REMOTE_READER) a thread of another process reading the
 *              shared cache (client-design.md §3; the code is being written:
 *              remote_rcu::read_lock()/read_unlock() over a slot of
 *              alloc/reader_registry.h ReaderRegistry): registration (CAS a
 *              free slot's owner 0 -> id, fence, in_use++), slot.ctr =
 *              gp_ctr with no fence, lookup and copy as Reader, slot.ctr = 0;
 *              or killed inside the section.  x86-TSO: its stores go through
 *              a store buffer.
 *   StoreBuffer   (REMOTE_READER) the remote reader's CPU draining that
 *              buffer.  The writer's side of the registry is
 *              ReaderRegistry::synchronize() (alloc/reader_registry.cc),
 *              run by Driver and Expedite inside rcu::synchronize() after
 *              liburcu's grace period: fence, zero-cost test, membarrier,
 *              two phase flips each followed by a wait, and the reclaim of
 *              a dead owner's slot (reg_synchronize(), reg_wait()).
 * PagePool::Impl::free() is the inline pool_free(), cut_locked() is cut(),
 * batch_ready_locked() is batch_ready(), GracePeriods (alloc/grace_period.h)
 * is gp_synchronize()/take_cookie(), rcu::synchronize() is rcu_synchronize().
 *
 * Build-time switches (spin -DNAME -a deferral.pml):
 *   URCU_MEMB            rcu_synchronize() is liburcu's memb algorithm (a
 *                        phase flip between two waits, per-reader ctr)
 *                        instead of the abstract "wait for every reader
 *                        inside a section at the start".
 *   URCU_MEMB_NO_PASS2   (with URCU_MEMB) a broken liburcu: no second wait.
 * Mutants, each must give a counterexample (to the property unless said):
 *   NO_SLOT_LOCK         the per-slot lock is gone.
 *   QUEUE_INTO_BATCH     free() adds the page to the in-flight batch, whose
 *                        grace period may have started, rather than pending.
 *   FREE_BEFORE_GP       a batch is freed without polling its cookie.
 *   COOKIE_OFF_BY_ONE    cookie() returns `started`, not `started + 1`: the
 *                        batch waits for a grace period that may be running.
 *   RCU_FREE_AFTER_PUT   the remover drops its reference before it sets
 *                        rcu_free (another thread's last put frees at once).
 *   UNLINK_AFTER_QUEUE   the page is queued (and its batch's cookie taken)
 *                        before it leaves the index.
 *   READ_AFTER_UNLOCK    the reader copies after its rcu_read_unlock().
 *   SWEEP_NO_REQUEST     sweep() cuts a batch but does not request its grace
 *                        period: not the property, the "nothing stranded"
 *                        check (see `timeout` in Driver) must fail.
 *   END_PUBLISHES_STARTED  GracePeriods::end() publishes `started` rather
 *                        than the number its begin() returned (a counter-
 *                        example needs THREE_PAGES: two grace periods at
 *                        once, the driver's and the expedite worker's).
 * Readers in other processes (see "readers in other processes" below):
 *   REMOTE_READER        adds RemoteReader and StoreBuffer, and the
 *                        registry's grace period to rcu::synchronize().
 *                        Run with NO_REF_READER and NO_READER (the other
 *                        readers only delay grace periods; with them the
 *                        state space is 17x and 300x larger).
 *   REMOTE_SC            (control) the remote reader's stores are visible
 *                        at once: sequential consistency, no store buffer.
 *   REGISTRY_SNAPSHOT    (correct variant) the writer waits only for the
 *                        slots active in a snapshot taken after the
 *                        membarrier, before the first flip.
 *   NO_RECLAIM           (control) a dead owner's slot is never reclaimed:
 *                        the "blocked by a dead reader" check must fail.
 * Mutants of the registry, each must give a counterexample to the property:
 *   REGISTRY_SKIPPED     rcu::synchronize() does not wait for the registry.
 *   REGISTRY_BEFORE_FLIP the writer decides whom to wait for from a snapshot
 *                        of the active slots taken before the membarrier
 *                        (and so before the flips).
 *   RECLAIM_LIVE         the reclaim takes a live owner for dead.
 *   NO_REG_FENCE         the registration's in_use++ is not ordered before
 *                        the section's lookups (no barrier after it).
 *   NO_MEMBARRIER        the registry's grace period issues no membarrier.
 *   REGISTRY_ONE_FLIP    one phase flip and one wait instead of two.
 *   (NO_REG_FENCE, NO_MEMBARRIER and REGISTRY_BEFORE_FLIP need the store
 *   buffer: with REMOTE_SC they pass.)
 * Other switches:
 *   NO_REF_READER        no RefReader process (smaller state space).
 *   NO_READER            no Reader process (smaller state space).
 *   THREE_PAGES          three pages instead of two.
 *   ONLY_GUARANTEE       no secondary checks (see check() below).
 */

#ifdef THREE_PAGES
#define NP     3   /* pages 0..NP-1, all in the index at the start */
#else
#define NP     2
#endif
#define NS     2   /* pool slots */
#define OWNER  0   /* slot of the Remover thread */
#define RSLOT  1   /* slot of the RefReader thread (its last put frees there) */
#define NRD    2   /* RCU readers */
#define RD_NOREF 0
#define RD_REF   1

#define BIT(p) (1 << (p))

/* Secondary checks (list invariant I1, no double free, nothing stranded on a
 * list once nothing can move).  ONLY_GUARANTEE
 * leaves just the property, so that a mutant that also corrupts the lists
 * shows a counterexample to the property itself. */
#ifdef ONLY_GUARANTEE
#define check(c) skip
#else
#define check(c) assert(c)
#endif

/* ── pages: alloc/page.h, cache/page.h ── */
bool in_index[NP] = true;  /* PageIndex slot holds the page */
bool rcu_free[NP];  /* Page::kRcuFree */
byte ref[NP] = 1;    /* refcount bits of the state word (Cas discipline) */
bool freed[NP];     /* back in the arena (release_to_arena) */
bool poisoned[NP];  /* bytes overwritten: poison_on_free / the next user */
/* Any page of the set m (a bitmask) reused. */
#ifdef THREE_PAGES
#define reused(m) (((m) & 1) && poisoned[0] || ((m) & 2) && poisoned[1] || ((m) & 4) && poisoned[2])
#else
#define reused(m) (((m) & 1) && poisoned[0] || ((m) & 2) && poisoned[1])
#endif

/* Pages set rcu_free but not yet back in the arena, when nothing can move. */
#define stranded (pending[0] | pending[1] | inflight[0] | inflight[1])

/* ── pool slots: alloc/page_pool.cc struct Slot (lists as page bitmasks) ── */
byte pending[NS];
byte inflight[NS];
byte inflight_cookie[NS];
bool slot_locked[NS];
bool exp_queued[NS];  /* Slot::expedite_queued */
byte exp_queue;       /* Impl::expedite_queue, a set of slots */

/* ── grace periods: alloc/grace_period.h, Impl::gp_requested ── */
byte gp_started;
byte gp_completed;
byte gp_requested;

/* ── RCU (liburcu memb) ── */
#ifdef URCU_MEMB
bool gp_phase;        /* rcu_gp.ctr's URCU_GP_CTR_PHASE bit */
bool gp_mutex;        /* rcu_gp_lock */
bool rd_active[NRD];  /* reader ctr & URCU_GP_CTR_NEST_MASK (no nesting here) */
bool rd_phase[NRD];   /* reader ctr & URCU_GP_CTR_PHASE */
#else
byte rd_sec[NRD];     /* sections entered + left: odd = inside one */
#endif

/* ── readers in other processes (REMOTE_READER; client-design.md §3) ──
 * The registry of reader slots in shared memory (alloc/reader_registry.h
 * ReaderRegistry), liburcu memb's algorithm over it.  One slot and one
 * remote reader thread (one process).  gp_ctr = GP_COUNT | phase, as
 * liburcu's rcu_gp.ctr; a slot's ctr is 0 outside a section, else a copy of
 * gp_ctr taken at the outermost lock (GP_COUNT is the nest count 1: the
 * model's reader does not nest).
 *
 * Memory model.  The daemon side (Driver, Expedite, Remover) is sequentially
 * consistent, as everywhere in this model (its fences are no-ops here).  The
 * remote reader is x86-TSO: its plain stores (slot.ctr at lock and unlock)
 * go into a FIFO store buffer (sb_*) that the StoreBuffer process drains one
 * entry at a time, at any moment; a locked instruction (the registration's
 * CAS and in_use++) or a fence drains it first; the writer's membarrier
 * (GLOBAL_EXPEDITED: a full barrier on every CPU running a thread of a
 * registered process, and a context switch is one for the others) drains it
 * at once.  Its loads are in program order and not reordered with its later
 * stores (TSO).  That is the "no fence on the reader" of
 * remote_rcu::read_lock(): its store of ctr may become visible after its
 * lookups, and only the writer's membarrier orders it.  Unlike the URCU_MEMB
 * model of the daemon's own readers (sequentially consistent, the phase-flip
 * race only), this makes the membarrier and the registration's barrier
 * matter (NO_MEMBARRIER, NO_REG_FENCE; REMOTE_SC is the SC control).
 * Weaker than TSO (a reader's loads of the page after its unlock store, as
 * ARM allows) is not modelled: liburcu ends its grace period with a second
 * membarrier for that (smp_mb_master() after the waits), the specification
 * modelled here has none. */
#ifdef REMOTE_READER
#define GP_COUNT 1
#define GP_PHASE 2
#define RPID     1     /* the remote process's id (slot owner) */
#define SB_CTR   0     /* store buffer entry: slot_ctr = val */
#define SB_INUSE 1     /* store buffer entry: in_use = val */
byte gp_ctr = GP_COUNT; /* ReaderRegistry's gp_ctr */
bool reg_mutex;         /* ReaderRegistry::synchronize()'s mutex */
byte in_use;            /* slots in use (registered) */
byte slot_owner;        /* 0 free, else the owner's id */
byte slot_ctr;          /* 0 outside a section, else GP_COUNT | phase */
bool rdead;             /* the owner has died (its pidfd is readable) */
byte sb_len;            /* the remote reader's store buffer, oldest first */
byte sb_var[3];
byte sb_val[3];

#ifdef REMOTE_SC
/* The control: a sequentially consistent reader, its stores visible at
 * once (the buffer stays empty). */
inline sb_push(var, val) {
  if
  :: var == SB_CTR -> slot_ctr = val
  :: else -> in_use = val
  fi
}
#else
inline sb_push(var, val) {
  sb_var[sb_len] = var; sb_val[sb_len] = val; sb_len++
}
#endif
/* The oldest buffered store reaches memory. */
inline sb_commit() {
  if
  :: sb_var[0] == SB_CTR -> slot_ctr = sb_val[0]
  :: else -> in_use = sb_val[0]
  fi;
  sb_var[0] = sb_var[1]; sb_val[0] = sb_val[1];
  sb_var[1] = sb_var[2]; sb_val[1] = sb_val[2];
  sb_var[2] = 0; sb_val[2] = 0;
  sb_len--
}
/* A full barrier on the reader's CPU: its buffer drains. */
inline sb_drain() {
  do
  :: sb_len > 0 -> sb_commit()
  :: else -> break
  od
}
#endif

/* ── the slot lock (SpinLock) ──
 * A critical section is modelled as at most two atomic blocks, CS_BEGIN ..
 * CS_END, each with one access to a variable the slot lock does not guard
 * (gp_completed or gp_started); the rest (the slot's lists, cookie and
 * expedite flag) no other process touches while the lock is held.  By
 * Lipton's reduction (lock = right mover, unlock = left mover, accesses to
 * guarded variables both) this has exactly the reachable states of the
 * step-by-step section, with fewer interleavings to explore.  Without the
 * lock (NO_SLOT_LOCK) every statement is its own step. */
#ifdef NO_SLOT_LOCK
#define CS_BEGIN
#define CS_END
inline slot_lock(s) { skip }
inline slot_unlock(s) { skip }
#else
#define CS_BEGIN atomic {
#define CS_END }
inline slot_lock(s) { !slot_locked[s] -> slot_locked[s] = true }
inline slot_unlock(s) {
  check(pending[s] == 0 || inflight[s] != 0);  /* (I1) of page_pool.cc */
  slot_locked[s] = false
}
#endif

/* ── RCU read side: alloc/rcu.h read_lock()/read_unlock() ── */
#ifdef URCU_MEMB
/* _urcu_memb_read_lock_update(): ctr = gp.ctr, a load then a store. */
inline rcu_read_lock(r) {
  rtmp = gp_phase;
  d_step { rd_phase[r] = rtmp; rd_active[r] = true; rtmp = 0 }
}
inline rcu_read_unlock(r) { rd_active[r] = false }
#else
inline rcu_read_lock(r) { rd_sec[r]++ }
inline rcu_read_unlock(r) { rd_sec[r]++ }
#endif

/* ── rcu::synchronize() (urcu_memb_synchronize_rcu) ── */
#ifdef URCU_MEMB
/* urcu_memb_synchronize_rcu() (liburcu 0.13 src/urcu.c), with gp_mutex for
 * rcu_gp_lock.  Pass 1, wait_for_readers(&registry, &cur_snap_readers, ..):
 * each reader is classified, in any order, once it is quiescent (-> done)
 * or in a section of the current phase (-> cur, for pass 2); one in a
 * section of the old phase is waited for.  Then the phase flips, and pass
 * 2, wait_for_readers(&cur_snap_readers, NULL, ..), waits for each reader
 * of cur until it is quiescent or of the new phase.  `gi` is the set of
 * readers not yet classified.  The membarriers around it are no-ops in
 * this sequentially consistent model. */
#define reader_ok(r) (!rd_active[r] || rd_phase[r] == gp_phase)
inline rcu_synchronize() {
  atomic { !gp_mutex -> gp_mutex = true; gi = 3 };
  do
  :: atomic { (gi & 1) && reader_ok(0) -> cur[0] = rd_active[0]; gi = gi & 2 }
  :: atomic { (gi & 2) && reader_ok(1) -> cur[1] = rd_active[1]; gi = gi & 1 }
  :: gi == 0 -> break
  od;
  gp_phase = !gp_phase;
#ifdef URCU_MEMB_NO_PASS2
  gi = 0;
#else
  gi = 3;
#endif
  do
  :: atomic { (gi & 1) && (!cur[0] || reader_ok(0)) -> cur[0] = false; gi = gi & 2 }
  :: atomic { (gi & 2) && (!cur[1] || reader_ok(1)) -> cur[1] = false; gi = gi & 1 }
  :: gi == 0 -> break
  od;
  gp_mutex = false
}
#else
/* The RCU guarantee itself: wait for every reader that is inside a
 * read-side section when the grace period starts.  One wait for all of
 * them: "has left the section it was in" stays true once true, so waiting
 * for the readers one after another ends at the same moment. */
inline rcu_sync_start() { snap0 = rd_sec[0]; snap1 = rd_sec[1] }
inline rcu_sync_wait() {
  ((snap0 & 1) == 0 || rd_sec[0] != snap0) && ((snap1 & 1) == 0 || rd_sec[1] != snap1);
  snap0 = 0;
  snap1 = 0
}
#endif

#ifdef REMOTE_READER
/* ── ReaderRegistry::synchronize() (alloc/reader_registry.cc) ──
 * The registry's grace period, run by rcu::synchronize() after liburcu's:
 * a full fence (a no-op for the sequentially consistent writer); no slot in
 * use: done (the zero-cost path, the Dekker pairing with the registration's
 * fence); else membarrier(GLOBAL_EXPEDITED), then flip gp_ctr's phase and
 * wait, twice.  A wait on a slot is over when the slot is free, quiescent
 * (ctr 0) or in a section of the current phase; while it waits on a slot
 * whose owner is dead it reclaims the slot (ctr = 0, owner = 0, in_use--).
 * Two flips, each followed by a wait (the older liburcu form; liburcu 0.13
 * flips once between two waits, see rcu_synchronize()).  reg_mutex, held
 * throughout, is an assumption of the model: two writers (the driver and
 * the expedite worker) must not flip gp_ctr at once.  REGISTRY_ONE_FLIP
 * shows why two: a reader that loaded gp_ctr before the first grace period's
 * flip and stored it after that grace period's wait carries the phase that
 * the next grace period's single flip makes "current".
 *
 * REGISTRY_BEFORE_FLIP: the writer reads which slots are active (ctr != 0)
 * once, right after the zero-cost test, before the membarrier and the
 * flips, and waits only for those.  That is the faithful form of "read
 * before the flip": the same snapshot taken after the membarrier (still
 * before the flip, REGISTRY_SNAPSHOT, a correct variant) is safe, since a
 * slot idle after the membarrier can only start sections whose lookups
 * follow the unlink; before the membarrier, a reader whose ctr store is
 * still in its store buffer looks idle although it has found the page.
 * With one slot the snapshot is one bit, `wset`. */
#ifdef RECLAIM_LIVE
#define owner_dead (slot_owner != 0)  /* the liveness test is wrong */
#elif defined(NO_RECLAIM)
#define owner_dead false
#else
#define owner_dead (slot_owner != 0 && rdead)
#endif
#define slot_done (slot_owner == 0 || slot_ctr == 0 || (slot_ctr & GP_PHASE) == (gp_ctr & GP_PHASE))
/* wait_for_readers() over the registry.  Nothing can move while a writer
 * waits only if the slot's owner is dead and not reclaimed (NO_RECLAIM): the
 * grace period would never end. */
inline reg_wait() {
  do
  :: !wset || slot_done -> break
  :: atomic { owner_dead -> slot_ctr = 0; slot_owner = 0; in_use-- }
  :: timeout -> check(!rdead)
  od
}
inline reg_synchronize() {
#ifdef REGISTRY_SKIPPED
  skip  /* liburcu's grace period only */
#else
  atomic { !reg_mutex -> reg_mutex = true };
  if
  :: in_use == 0 -> skip  /* zero-cost: nobody registered */
  :: else ->
#ifdef REGISTRY_BEFORE_FLIP
     wset = (slot_ctr != 0);
#endif
#ifndef NO_MEMBARRIER
     d_step { sb_drain() };  /* membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) */
#endif
#if defined(REGISTRY_SNAPSHOT)
     wset = (slot_ctr != 0);
#elif !defined(REGISTRY_BEFORE_FLIP)
     wset = true;  /* every slot is looked at */
#endif
     gp_ctr = gp_ctr ^ GP_PHASE;
     reg_wait();
#ifndef REGISTRY_ONE_FLIP
     gp_ctr = gp_ctr ^ GP_PHASE;
     reg_wait();
#endif
     wset = false
  fi;
  reg_mutex = false
#endif
}
#endif

/* ── GracePeriods (alloc/grace_period.h, grace_period.cc) ── */
/* cookie(): started.fetch_add(0) + 1 */
#ifdef COOKIE_OFF_BY_ONE
inline take_cookie(c) { c = gp_started }
#else
inline take_cookie(c) { c = gp_started + 1 }
#endif
/* begin(): started.fetch_add(1) + 1 */
inline gp_begin() { gp_started++; sn = gp_started }
/* end(s): CAS-max of completed */
#ifdef END_PUBLISHES_STARTED
inline gp_end() { if :: gp_completed < gp_started -> gp_completed = gp_started :: else -> skip fi; sn = 0 }
#else
inline gp_end() { if :: gp_completed < sn -> gp_completed = sn :: else -> skip fi; sn = 0 }
#endif
/* synchronize(): end(begin()) around rcu::synchronize().  With the abstract
 * RCU, two steps: begin() with the start of the grace period, and the end
 * of the wait with end().  Merging is exact: begin() writes only `started`,
 * which the readers' steps do not touch, and the snapshot reads only the
 * readers' counters, which no cookie step touches (likewise at the end). */
inline gp_synchronize() {
#ifdef URCU_MEMB
  atomic { gp_begin() };
  rcu_synchronize();
#ifdef REMOTE_READER
  reg_synchronize();
#endif
  atomic { gp_end() }
#elif defined(REMOTE_READER)
  /* rcu::synchronize(): liburcu's grace period, then the registry's */
  atomic { gp_begin(); rcu_sync_start() };
  atomic { rcu_sync_wait() };
  reg_synchronize();
  atomic { gp_end() }
#else
  atomic { gp_begin(); rcu_sync_start() };
  atomic { rcu_sync_wait(); gp_end() }
#endif
}

/* ── PagePool::Impl (alloc/page_pool.cc) ── */
/* batch_ready_locked(): inflight non-empty and gp.poll(inflight_cookie) */
#ifdef FREE_BEFORE_GP
#define batch_ready(s) (inflight[s] != 0)
#else
#define batch_ready(s) (inflight[s] != 0 && gp_completed >= inflight_cookie[s])
#endif

/* cut_locked(): inflight = pending.take(); inflight_cookie = gp.cookie() */
inline cut(s, c) {
  inflight[s] = pending[s];
  pending[s] = 0;
  take_cookie(c);
  inflight_cookie[s] = c
}

/* request_gp(): CAS-max of gp_requested */
inline request_gp(c) {
  if :: c > gp_requested -> gp_requested = c :: else -> skip fi;
  c = 0
}

/* release_to_arena(): the memory is reusable from here (poison_on_free). */
inline release(p) {
  d_step { check(!freed[p]); freed[p] = true; poisoned[p] = true }
}

/* free_waited(): frees the pages of a list.  One step: freeing them one by
 * one only adds schedules in which some are still unfreed, and a reader
 * that sees none of them reused in those sees none here either. */
inline free_list(m) {
  d_step {
    j = 0;
    do
    :: j < NP -> if :: m & BIT(j) -> release(j) :: else -> skip fi; j++
    :: else -> break
    od;
    j = 0;
    m = 0
  }
}

/* PagePool::Impl::free(), driver engine, expedite threshold 1. */
inline pool_free(p, s) {
  if
  :: !rcu_free[p] -> release(p)  /* immediate */
  :: else ->
     CS_BEGIN
       slot_lock(s);
#ifdef QUEUE_INTO_BATCH
       if
       :: inflight[s] != 0 -> inflight[s] = inflight[s] | BIT(p)
       :: else -> pending[s] = pending[s] | BIT(p)
       fi;
#else
       pending[s] = pending[s] | BIT(p);  /* s->pending.push(p) */
#endif
       /* our completed batch: free it here */
       if
       :: batch_ready(s) -> ready = inflight[s]; inflight[s] = 0
       :: else -> skip
       fi
     CS_END;
     CS_BEGIN
       if
       :: inflight[s] == 0 && pending[s] != 0 -> cut(s, ck)
       :: else -> skip
       fi;
       /* pending.n >= expedite_pages (1 here) and not yet queued */
       if
       :: pending[s] != 0 && !exp_queued[s] -> exp_queued[s] = true; qexp = true
       :: else -> skip
       fi;
       slot_unlock(s)
     CS_END;
     /* request_gp(), then queue_expedite(): one step, as each writes what
      * only one other process reads (the driver, the expedite worker). */
     d_step {
       request_gp(ck);
       if
       :: qexp -> exp_queue = exp_queue | BIT(s); qexp = false
       :: else -> skip
       fi
     }
     free_list(ready)
  fi
}

/* pg::put(): true if it dropped the last reference. */
inline put(p, last) { d_step { ref[p]--; last = (ref[p] == 0) } }

/* sweep() for one slot: free its batch if ready, cut pending behind it (I1). */
inline sweep_slot(s) {
  CS_BEGIN
    slot_lock(s);
    if
    :: batch_ready(s) -> ready = inflight[s]; inflight[s] = 0
    :: else -> skip
    fi
  CS_END;
  CS_BEGIN
    if
    :: ready != 0 && pending[s] != 0 -> cut(s, ck)
    :: else -> skip
    fi;
    slot_unlock(s)
  CS_END;
  free_list(ready);
#ifdef SWEEP_NO_REQUEST
  ck = 0
#else
  d_step { request_gp(ck) }
#endif
}

/* ── processes ── */

active proctype Remover() {
  byte i, ready, ck, j;
  bool last, qexp;
  do
  :: i < NP ->
     if
     :: true ->
#if defined(RCU_FREE_AFTER_PUT)
        in_index[i] = false;
        put(i, last);
        rcu_free[i] = true;
#elif defined(UNLINK_AFTER_QUEUE)
        rcu_free[i] = true;
        put(i, last);
        if
        :: last -> pool_free(i, OWNER)
        :: else -> skip
        fi;
        last = false;
        in_index[i] = false;
#else
        /* remove_locked(): erase from the index, set rcu_free (one step:
         * only the thread that drops the last reference reads rcu_free,
         * and that cannot happen before our put below) */
        d_step { in_index[i] = false; rcu_free[i] = true };
        /* free_removed(): put the cache's reference; the last put frees */
        put(i, last);
#endif
        if
        :: last -> pool_free(i, OWNER)
        :: else -> skip
        fi;
        last = false
     :: atomic { ref[i] == 1 -> ref[i] = 0 } ->
        /* evict(): pg::freeze() won, remove_locked(frozen), free_removed() */
        d_step { in_index[i] = false; rcu_free[i] = true };
        pool_free(i, OWNER)
     :: ref[i] != 1 -> skip  /* evict(): freeze refused, a reader holds it */
     fi;
     i++
  :: else -> break
  od
}

active proctype Driver() {
  byte ready, ck, j, sn, gi;
#ifdef REMOTE_READER
  bool wset;
#endif
#ifdef URCU_MEMB
  bool cur[NRD];
#else
  byte snap0, snap1;
#endif
  end:
  do
  :: gp_requested > gp_completed -> gp_synchronize()
  /* A sweep of a slot with no ready batch does nothing but take its lock. */
  :: batch_ready(OWNER) -> sweep_slot(OWNER)
  :: batch_ready(RSLOT) -> sweep_slot(RSLOT)
  /* Nothing in the system can move: every page that was queued for a grace
   * period must be back in the arena (nothing stranded on a list, I1). */
  :: timeout -> check(stranded == 0)
  od
}

active proctype Expedite() {
  byte s, list, ready, ck, j, sn, gi;
#ifdef REMOTE_READER
  bool wset;
#endif
#ifdef URCU_MEMB
  bool cur[NRD];
#else
  byte snap0, snap1;
#endif
  end:
  do
  :: exp_queue != 0 ->
     d_step {
       if
       :: exp_queue & BIT(OWNER) -> s = OWNER
       :: else -> s = RSLOT
       fi;
       exp_queue = exp_queue & ~BIT(s)
     }
     CS_BEGIN
       slot_lock(s);
       list = pending[s];
       pending[s] = 0;
       exp_queued[s] = false;
       slot_unlock(s)
     CS_END;
     if
     :: list != 0 ->
        gp_synchronize();
        free_list(list);  /* complete(): freed here or handed to the owner */
        /* sweep(false): our grace period may have completed other batches */
        if
        :: batch_ready(OWNER) -> sweep_slot(OWNER)
        :: else -> skip
        fi;
        if
        :: batch_ready(RSLOT) -> sweep_slot(RSLOT)
        :: else -> skip
        fi
     :: else -> skip
     fi;
     s = 0
  od
}

/* fast_locked(): pages from a nondeterministic start, no reference. */
#ifdef NO_READER
proctype Reader() {
#else
active proctype Reader() {
#endif
  byte i, found, seen;  /* seen: the pages this section found */
#ifdef URCU_MEMB
  bool rtmp;
#endif
  if
  :: i = 0
  :: i = 1
#ifdef THREE_PAGES
  :: i = 2
#endif
  fi;
  rcu_read_lock(RD_NOREF);
  do
  :: i < NP ->
     if
     :: in_index[i] -> found = i; seen = seen | BIT(i)
     :: else -> break  /* Stop::missing */
     fi;
#ifdef READ_AFTER_UNLOCK
     /* the copy after the section: as if read_iov() sent the iovec
      * pointing into the page after its ReadGuard */
     assert(!reused(seen));
     rcu_read_unlock(RD_NOREF);
     assert(!poisoned[found]);
     assert(!poisoned[found]);
     goto done;
#endif
     /* sink.put(p->data + off, n): a memcpy, observed in two steps */
     assert(!poisoned[found]);
     assert(!poisoned[found]);
     i++
  :: else -> break
  od;
  assert(!reused(seen));
  rcu_read_unlock(RD_NOREF)
#ifdef READ_AFTER_UNLOCK
  ;
done:
  skip
#endif
}

/* get_page() + slow_page(): the reference path for one page. */
#ifdef NO_REF_READER
proctype RefReader() {
#else
active proctype RefReader() {
#endif
  byte i, found, ready, ck, j;
  bool got, last, qexp;
#ifdef URCU_MEMB
  bool rtmp;
#endif
  if
  :: i = 0
  :: i = 1
#ifdef THREE_PAGES
  :: i = 2
#endif
  fi;
  rcu_read_lock(RD_REF);
  if
  :: in_index[i] -> found = i
  :: else -> rcu_read_unlock(RD_REF); goto out  /* miss */
  fi;
  /* pg::try_get(), Cas: refuses a zero (frozen or dead) count */
  d_step {
    if
    :: ref[found] > 0 -> ref[found]++; got = true
    :: else -> got = false
    fi
  }
  if
  :: !got -> assert(!poisoned[found]); rcu_read_unlock(RD_REF); goto out  /* frozen */
  :: else -> got = false
  fi;
  if
  :: in_index[i] ->
     assert(!poisoned[found]);
     rcu_read_unlock(RD_REF);
     /* slow_page(): memcpy under the reference, outside the section */
     assert(!poisoned[found]);
     assert(!poisoned[found]);
     put(found, last)
  :: else ->
     /* get_page(): removed meanwhile, put inside the section */
     put(found, last);
     if
     :: last -> pool_free(found, RSLOT)
     :: else -> skip
     fi;
     last = false;
     assert(!poisoned[found]);
     rcu_read_unlock(RD_REF)
  fi;
  if
  :: last -> pool_free(found, RSLOT)
  :: else -> skip
  fi;
out:
  skip
}

#ifdef REMOTE_READER
/* A client thread's fast read (libnorefs_client, the same fast path as
 * Reader) inside remote_rcu::read_lock()/read_unlock(), on its first read:
 * registration, then one section.  It may be killed inside the section: it
 * stops for good without unlocking (rdead, once its store buffer has
 * drained: the kernel's exit path is serializing). */
active proctype RemoteReader() {
  byte i, found, seen, v;
  if
  :: i = 0
  :: i = 1
#ifdef THREE_PAGES
  :: i = 2
#endif
  fi;
  /* remote_rcu register: CAS a free slot's owner 0 -> id (a locked
   * instruction: the buffer is empty), a seq_cst fence (a no-op: the CAS
   * drained the buffer), in_use++ (a locked RMW, which drains it again).
   * The Dekker pairing with the writer's fence + zero-cost test is in_use++
   * against the section's lookups: on TSO the lock prefix orders them; the
   * fence between the CAS and in_use++ does not (doubtful on weaker memory:
   * there the fence belongs after in_use++).  NO_REG_FENCE: nothing orders
   * the in_use store before the lookups (a plain increment, no barrier
   * after it).  The process's membarrier registration
   * (MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, at the client's start) is
   * assumed. */
  atomic { slot_owner == 0 -> slot_owner = RPID };
#ifdef NO_REG_FENCE
  d_step { v = in_use + 1; sb_push(SB_INUSE, v); v = 0 };
#else
  in_use++;
#endif
  /* remote_rcu::read_lock(): slot.ctr = gp_ctr, a load, then a plain store
   * into the store buffer (no fence) */
  v = gp_ctr;
  d_step { sb_push(SB_CTR, v); v = 0 };
  do
  :: i < NP ->
     if
     :: in_index[i] -> found = i; seen = seen | BIT(i)
     :: else -> break  /* Stop::missing */
     fi;
     assert(!poisoned[found]);
     assert(!poisoned[found]);
     i++
  :: i >= NP -> break
  :: atomic { sb_len == 0 -> rdead = true }; goto dead  /* kill -9 */
  od;
  assert(!reused(seen));
  /* remote_rcu::read_unlock(): slot.ctr = 0, a plain store */
  d_step { sb_push(SB_CTR, 0) };
dead:
  skip
}

/* The remote reader's CPU drains its store buffer, one store at a time. */
active proctype StoreBuffer() {
  end:
  do
  :: atomic { sb_len > 0 -> sb_commit() }
  od
}
#endif
