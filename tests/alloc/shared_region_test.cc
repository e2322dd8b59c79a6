// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The shared region (alloc/shared_region.h): every page, descriptor and
// shared allocation of a pool lies in it; memory jemalloc purges goes back
// to the kernel (the memfd's blocks, not only the page tables); another
// process maps it read-only at the same address and sees the same bytes; a
// full region is ENOMEM, not a crash.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "alloc/shared_region.h"
#include "test_util.h"

extern char** environ;

namespace norefs::alloc::test {
namespace {

// Bytes the memfd holds: what the kernel has given it and not had back.
std::uint64_t region_blocks_bytes(const SharedRegion& r) {
  struct stat st {};
  EXPECT_EQ(fstat(r.fd(), &st), 0);
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

std::vector<Page*> fill(PagePool& pool, std::size_t n) {
  std::vector<Page*> v;
  for (std::size_t i = 0; i < n; i++) {
    Page* p = pool.alloc();
    if (!p) break;
    std::memset(p->data, 0x5a, kPageSize);
    v.push_back(p);
  }
  return v;
}

TEST(SharedRegionTest, PagesDescriptorsAndSharedAllocationsLieInTheRegion) {
  PagePool pool;
  const SharedRegion& r = pool.region();
  auto base = reinterpret_cast<std::uintptr_t>(r.base());
  EXPECT_GE(base, SharedRegion::kBandLow);
  EXPECT_LT(base + r.size(), SharedRegion::kBandHigh + 1) << "the region is outside the band";
  std::vector<Page*> pages = fill(pool, 256);
  ASSERT_EQ(pages.size(), 256u);
  for (Page* p : pages) {
    EXPECT_TRUE(r.contains(p, sizeof(Page)));
    EXPECT_TRUE(r.contains(p->data, kPageSize));
  }
  SharedAlloc heap = pool.shared_alloc();
  void* node = heap.alloc(528, 64);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(r.contains(node, 528));
  heap.free(node, 528, 64);
  for (Page* p : pages) pool.free(p);
}

// Pages freed and purged leave the memfd.  The control (never purge) shows
// that the measure sees pages that stay.
TEST(SharedRegionTest, PurgedMemoryGoesBackToTheKernel) {
  constexpr std::size_t kPages = 4096;  // 16 MiB
  for (long decay : {0L, -1L}) {
    PagePoolConfig cfg;
    cfg.defer = false;
    cfg.dirty_decay_ms = decay;
    PagePool pool(cfg);
    std::vector<Page*> pages = fill(pool, kPages);
    ASSERT_EQ(pages.size(), kPages);
    const std::uint64_t full = region_blocks_bytes(pool.region());
    EXPECT_GE(full, kPages * kPageSize) << "decay " << decay;
    for (Page* p : pages) pool.free(p);
    pool.drain();
    const std::uint64_t after = region_blocks_bytes(pool.region());
    if (decay == 0) {
      // What stays: descriptors still in use by jemalloc's slabs, its
      // metadata, the header page: well under a tenth.
      EXPECT_LT(after, full / 10) << "the memfd kept " << after << " of " << full << " bytes";
    } else {
      EXPECT_GE(after, kPages * kPageSize) << "control: nothing is purged with decay -1";
    }
  }
}

struct ViewResult {
  int status = -1;
  std::string out;
};

// Runs the view helper on a copy of `fd` that it inherits.
ViewResult run_view(int fd, std::uint64_t off, std::size_t len) {
  ViewResult res;
  int child_fd = dup(fd);  // dup() clears FD_CLOEXEC
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::string prog = NOREFS_HELPER_REGION_VIEW, a1 = std::to_string(child_fd),
              a2 = std::to_string(off), a3 = std::to_string(len);
  char* argv[] = {prog.data(), a1.data(), a2.data(), a3.data(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, prog.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(child_fd);
  EXPECT_EQ(rc, 0) << prog;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) res.out.append(buf, n);
  close(out[0]);
  if (pid > 0) waitpid(pid, &res.status, 0);
  return res;
}

TEST(SharedRegionTest, AnotherProcessMapsItReadOnlyAtTheSameAddress) {
  PagePool pool;
  const SharedRegion& r = pool.region();
  Page* p = pool.alloc();
  ASSERT_NE(p, nullptr);
  for (std::size_t i = 0; i < 16; i++) p->data[i] = static_cast<std::byte>(0xa0 + i);
  ViewResult v = run_view(r.fd(), r.offset_of(p->data), 16);
  ASSERT_TRUE(WIFEXITED(v.status) && WEXITSTATUS(v.status) == 0) << v.out;
  char want[64];
  std::snprintf(want, sizeof want, "mapped 0x%" PRIxPTR "\n",
                reinterpret_cast<std::uintptr_t>(r.base()));
  EXPECT_NE(v.out.find(want), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("perms r--s\n"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("bytes a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\n"), std::string::npos) << v.out;
  pool.free(p);
}

TEST(SharedRegionTest, AViewRefusesWhatIsNotARegionAndATakenAddress) {
  PagePool pool;
  errno = 0;
  EXPECT_EQ(SharedRegion::map_view(pool.region().fd()), nullptr) << "mapped over ourselves";
  EXPECT_EQ(errno, EEXIST);
  int fd = memfd_create("not-a-region", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  ASSERT_EQ(pwrite(fd, "garbage garbage garbage garbage", 32, 0), 32);
  errno = 0;
  EXPECT_EQ(SharedRegion::map_view(fd), nullptr);
  EXPECT_EQ(errno, EINVAL);
  close(fd);
}

// A full region fails allocations (the cache's ENOMEM path) and works again
// once pages are freed.
TEST(SharedRegionTest, AFullRegionIsOutOfMemoryUntilPagesAreFreed) {
  PagePoolConfig cfg;
  cfg.defer = false;
  cfg.region_bytes = std::size_t{16} << 20;
  PagePool pool(cfg);
  std::vector<Page*> pages = fill(pool, 8192);
  EXPECT_GT(pages.size(), 0u);
  EXPECT_LT(pages.size(), 4096u) << "16 MiB of address space held more than 16 MiB of pages";
  EXPECT_EQ(pool.alloc(), nullptr);
  for (Page* p : pages) pool.free(p);
  Page* again = pool.alloc();
  EXPECT_NE(again, nullptr);
  if (again) pool.free(again);
}

}  // namespace
}  // namespace norefs::alloc::test
