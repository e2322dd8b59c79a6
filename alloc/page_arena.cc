// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/page_arena.h"

#include <jemalloc/jemalloc.h>

#include "alloc/die.h"

#include <algorithm>
#include <string>
#include <system_error>

namespace norefs::alloc {
namespace {

// A mallctl that cannot fail unless jemalloc or this code is broken.
#define NOREFS_MALLCTL(name, oldp, oldlenp, newp, newlen)                                          \
  do {                                                                                             \
    int err_ = mallctl((name), (oldp), (oldlenp), (newp), (newlen));                               \
    NOREFS_CHECK(err_ == 0,                                                                        \
                 std::string("mallctl ") + (name) + ": " + std::generic_category().message(err_)); \
  } while (0)

}  // namespace

// The extent hooks: jemalloc's view of the shared region.  jemalloc passes
// &hooks back to every call; `region` is found from it.  Hooks run on any
// thread, with jemalloc's locks held: carve() takes only the region's own
// leaf mutex.  Return values follow jemalloc's convention: false = done.
struct PageArena::Hooks {
  extent_hooks_t hooks;  // first: the pointer jemalloc hands back
  SharedRegion* region;

  static SharedRegion& of(extent_hooks_t* h) { return *reinterpret_cast<Hooks*>(h)->region; }

  // New address space, never handed out before: zero and committed (the
  // memfd's pages are zero until written and cost nothing until then).
  // jemalloc asks for a fixed `new_addr` only to grow an extent in place;
  // the bump order makes that impossible, so refuse (it then copies).
  static void* alloc(extent_hooks_t* h, void* new_addr, std::size_t size, std::size_t align,
                     bool* zero, bool* commit, unsigned) {
    if (new_addr) return nullptr;
    void* p = of(h).carve(size, std::max<std::size_t>(align, kPageSize));
    if (p) *zero = *commit = true;
    return p;
  }
  // Opt out: jemalloc keeps the range as retained address space and reuses
  // it (after decommit/commit), so the region is never carved twice.
  static bool dalloc(extent_hooks_t*, void*, std::size_t, bool, unsigned) { return true; }
  // At arena.<i>.destroy: the memory goes back; the address space stays the
  // region's until it is unmapped.
  static void destroy(extent_hooks_t* h, void* addr, std::size_t size, bool, unsigned) {
    of(h).give_back(addr, size);
  }
  // The mapping always stays read-write, so committing is nothing.
  static bool commit(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, unsigned) {
    return false;
  }
  // Decommit and forced purge both punch the range out of the memfd: the
  // pages go back to the kernel and the range reads as zeros, which is what
  // jemalloc assumes after either.
  static bool punch(extent_hooks_t* h, void* addr, std::size_t, std::size_t off, std::size_t len,
                    unsigned) {
    return !of(h).give_back(static_cast<std::byte*>(addr) + off, len);
  }
  // All of the region is one mapping: any extent may be split or merged.
  static bool split(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, bool, unsigned) {
    return false;
  }
  static bool merge(extent_hooks_t*, void*, std::size_t, void*, std::size_t, bool, unsigned) {
    return false;
  }
};

PageArena::PageArena(std::size_t region_bytes)
    : region_(region_bytes), hooks_(std::make_unique<Hooks>()) {
  // No lazy purge (MADV_FREE on a shared mapping frees nothing): jemalloc
  // then purges dirty memory with purge_forced.
  hooks_->hooks = {Hooks::alloc, Hooks::dalloc, Hooks::destroy, Hooks::commit, Hooks::punch,
                   nullptr,      Hooks::punch,  Hooks::split,   Hooks::merge};
  hooks_->region = &region_;
  extent_hooks_t* h = &hooks_->hooks;
  std::size_t sz = sizeof(index_);
  // The new value is the pointer h itself (arenas.create takes an
  // extent_hooks_t*), so its length is the pointer's.
  NOREFS_MALLCTL("arenas.create", &index_, &sz, &h,
                 sizeof(h));  // NOLINT(bugprone-sizeof-expression)
}

void* SharedAlloc::alloc(std::size_t size, std::size_t align) const {
  return mallocx(size, MALLOCX_ARENA(arena_) | MALLOCX_ALIGN(align) | MALLOCX_TCACHE_NONE);
}

void SharedAlloc::free(void* p, std::size_t size, std::size_t align) const {
  sdallocx(p, size, MALLOCX_ARENA(arena_) | MALLOCX_ALIGN(align) | MALLOCX_TCACHE_NONE);
}

PageArena::~PageArena() {
  std::string name = "arena." + std::to_string(index_) + ".destroy";
  NOREFS_MALLCTL(name.c_str(), nullptr, nullptr, nullptr, 0);
}

int PageArena::flags(int tcache, std::size_t align) const {
  int f = MALLOCX_ARENA(index_) | MALLOCX_ALIGN(align);
  return f | (tcache == kNoTcache ? MALLOCX_TCACHE_NONE : MALLOCX_TCACHE(tcache));
}

std::byte* PageArena::alloc_data(int tcache) {
  return static_cast<std::byte*>(mallocx(kPageSize, flags(tcache, kPageSize)));
}

void PageArena::free_data(std::byte* data, int tcache) {
  sdallocx(data, kPageSize, flags(tcache, kPageSize));
}

Page* PageArena::alloc_descriptor(int tcache) {
  void* mem = mallocx(sizeof(Page), flags(tcache, alignof(Page)));
  return mem ? new (mem) Page : nullptr;
}

void PageArena::free_descriptor(Page* page, int tcache) {
  page->~Page();
  sdallocx(page, sizeof(Page), flags(tcache, alignof(Page)));
}

int PageArena::tcache_create() {
  unsigned id = 0;
  std::size_t sz = sizeof(id);
  NOREFS_MALLCTL("tcache.create", &id, &sz, nullptr, 0);
  return static_cast<int>(id);
}

void PageArena::tcache_flush(int tcache) {
  unsigned id = static_cast<unsigned>(tcache);
  NOREFS_MALLCTL("tcache.flush", nullptr, nullptr, &id, sizeof(id));
}

void PageArena::tcache_destroy(int tcache) {
  unsigned id = static_cast<unsigned>(tcache);
  NOREFS_MALLCTL("tcache.destroy", nullptr, nullptr, &id, sizeof(id));
}

void PageArena::set_dirty_decay_ms(long ms) {
  ssize_t v = ms;
  std::string name = "arena." + std::to_string(index_) + ".dirty_decay_ms";
  NOREFS_MALLCTL(name.c_str(), nullptr, nullptr, &v, sizeof(v));
}

void PageArena::decay() {
  std::string name = "arena." + std::to_string(index_) + ".decay";
  NOREFS_MALLCTL(name.c_str(), nullptr, nullptr, nullptr, 0);
}

bool PageArena::owns(const void* p) const {
  unsigned arena = 0;
  std::size_t sz = sizeof(arena);
  const void* ptr = p;
  if (mallctl("arenas.lookup", &arena, &sz, &ptr, sizeof(ptr)) != 0) return false;
  return arena == index_;
}

ArenaStats PageArena::stats() const {
  std::uint64_t epoch = 1;
  std::size_t sz = sizeof(epoch);
  NOREFS_MALLCTL("epoch", &epoch, &sz, &epoch, sz);
  std::string prefix = "stats.arenas." + std::to_string(index_) + ".";
  std::size_t pactive = 0, resident = 0, page = 0;
  sz = sizeof(std::size_t);
  NOREFS_MALLCTL((prefix + "pactive").c_str(), &pactive, &sz, nullptr, 0);
  NOREFS_MALLCTL((prefix + "resident").c_str(), &resident, &sz, nullptr, 0);
  NOREFS_MALLCTL("arenas.page", &page, &sz, nullptr, 0);
  return ArenaStats{pactive * page, resident};
}

}  // namespace norefs::alloc
