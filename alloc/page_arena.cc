// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/page_arena.h"

#include <jemalloc/jemalloc.h>

#include "alloc/die.h"

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

PageArena::PageArena() {
  std::size_t sz = sizeof(index_);
  NOREFS_MALLCTL("arenas.create", &index_, &sz, nullptr, 0);
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
