// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/data_test.cc — bytes through the mount: write/read round trips at
// sizes around a page and the readahead window (128 KiB) and at unaligned
// offsets, cold sequential and random reads, write-through, fallocate
// (mode 0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE), SEEK_DATA/SEEK_HOLE,
// copy_file_range, fsync/flush.  The model is an in-memory copy of the file;
// every result is compared with it and with the backing file.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <cctype>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr std::size_t kRa = 128 * 1024;  // the default readahead window

const std::vector<std::size_t> kSizes{1,       kPage - 1, kPage,   kPage + 1,
                                      kRa - 1, kRa,       kRa + 1, kMiB + 1};

// One mount per read path for the round trips.
class DataTest : public MountTest, public ::testing::WithParamInterface<const char*> {
 protected:
  MountConfig config() const override { return {{std::string("read_path=") + GetParam()}, {}}; }
};

TEST_P(DataTest, WriteReadRoundTripsAtEverySizeAndOffset) {
  std::string model = random_bytes(2 * kMiB + 3, 100);
  write_file(m("f"), model);
  Fd fd(m("f"), O_RDWR);
  Fd backing(b("f"), O_RDONLY);
  const std::vector<std::size_t> offsets{0, 1, kPage - 1, kPage + 17, kRa - 3, 2 * kMiB - 100};
  std::uint64_t seed = 1000;
  for (std::size_t size : kSizes) {
    for (std::size_t off : offsets) {
      SCOPED_TRACE("write of " + std::to_string(size) + " at " + std::to_string(off));
      const std::string data = random_bytes(size, seed++);
      pwrite_all(fd.get(), data, static_cast<off_t>(off));
      model_write(model, data, off);
      // Written through before the reply.
      ASSERT_BYTES_EQ(data, pread_str(backing.get(), size, static_cast<off_t>(off)));
      // The same range and its neighbours through the mount.
      ASSERT_BYTES_EQ(data, pread_str(fd.get(), size, static_cast<off_t>(off)));
      std::size_t from = off >= 7 ? off - 7 : 0;
      std::size_t to = std::min(model.size(), off + size + 7);
      ASSERT_BYTES_EQ(model.substr(from, to - from),
                      pread_str(fd.get(), to - from, static_cast<off_t>(from)));
    }
  }
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
  for (std::size_t chunk : {kPage - 1, kPage + 1, kRa + 1, kMiB + 1}) {
    SCOPED_TRACE("whole file in reads of " + std::to_string(chunk));
    EXPECT_BYTES_EQ(model, read_chunked(fd.get(), chunk));
  }
  EXPECT_BYTES_EQ(model, read_file(b("f")));
}

// Files never seen by the daemon, read sequentially in every chunk size
// (readahead windows start, grow and hit EOF), then at random.
TEST_P(DataTest, ColdSequentialAndRandomReads) {
  const std::vector<std::size_t> chunks{kPage - 1, kPage,   kPage + 1, kRa - 1,
                                        kRa,       kRa + 1, kMiB + 1};
  std::vector<std::string> models;
  for (std::size_t i = 0; i < chunks.size(); i++) {
    models.push_back(random_bytes(3 * kMiB / 2 + 5 + i, 200 + i));
    write_file(b("cold" + std::to_string(i)), models.back());
  }
  for (std::size_t i = 0; i < chunks.size(); i++) {
    SCOPED_TRACE("cold file read in chunks of " + std::to_string(chunks[i]));
    Fd fd(m("cold" + std::to_string(i)), O_RDONLY);
    EXPECT_BYTES_EQ(models[i], read_chunked(fd.get(), chunks[i]));
  }
  // From an unaligned start, the rest of a cold file in window-sized reads.
  const std::string tail_model = random_bytes(kMiB + 1, 300);
  write_file(b("tail"), tail_model);
  {
    Fd fd(m("tail"), O_RDONLY);
    std::string got;
    for (std::size_t off = 1; off < tail_model.size(); off += kRa + 1) {
      got += pread_str(fd.get(), kRa + 1, static_cast<off_t>(off));
    }
    EXPECT_BYTES_EQ(tail_model.substr(1), got);
  }
  // Random reads over a cold file.
  const std::string model = random_bytes(4 * kMiB + 77, 301);
  write_file(b("random"), model);
  Fd fd(m("random"), O_RDONLY);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; i++) {
    std::size_t off = rng() % (model.size() + 10);
    std::size_t len = 1 + rng() % (200 * 1024);
    std::string want = off < model.size() ? model.substr(off, len) : "";
    std::string got = pread_str(fd.get(), len, static_cast<off_t>(off));
    ASSERT_BYTES_EQ(want, got) << " read " << len << " at " << off;
  }
}

INSTANTIATE_TEST_SUITE_P(ReadPaths, DataTest,
                         ::testing::Values("noref", "ref", "ref-fetchadd", "stackcopy"), path_name);

// ── Single-mount data tests (default options) ──

using DataOpsTest = MountTest;

TEST_F(DataOpsTest, FsyncFdatasyncAndClose) {
  Fd fd(m("f"), O_RDWR | O_CREAT, 0644);
  pwrite_all(fd.get(), "synced", 0);
  EXPECT_SYS(::fsync(fd.get()));
  EXPECT_SYS(::fdatasync(fd.get()));
  int dup = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
  ASSERT_GE(dup, 0);
  EXPECT_EQ(::close(dup), 0) << errno_name(errno);  // a flush per close
  EXPECT_EQ(fd.close(), 0) << errno_name(errno);
  EXPECT_EQ(read_file(b("f")), "synced");
}

TEST_F(DataOpsTest, FallocateModeZeroExtends) {
  const std::string data = random_bytes(10000, 400);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));  // cached
  blkcnt_t blocks_before = lstat_or_throw(b("f")).st_blocks;
  ASSERT_SYS(::fallocate(fd.get(), 0, 8000, 3 * kPage));
  std::string model = data;
  model.resize(8000 + 3 * kPage, '\0');
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
  EXPECT_EQ(lstat_or_throw(b("f")).st_size, static_cast<off_t>(model.size()));
  EXPECT_GT(lstat_or_throw(b("f")).st_blocks, blocks_before);
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 100, 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  // Inside the file: no change of bytes or size.
  ASSERT_SYS(::fallocate(fd.get(), 0, 0, 100));
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 100, 0));
}

TEST_F(DataOpsTest, FallocateKeepSize) {
  const std::string data = random_bytes(10000, 401);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  ASSERT_SYS(::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 20000, kMiB));
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, 10000);
  struct stat bs = lstat_or_throw(b("f"));
  EXPECT_EQ(bs.st_size, 10000);
  EXPECT_GE(bs.st_blocks * 512, static_cast<blkcnt_t>(kMiB));
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), 2 * kMiB, 0));
}

// Bytes between the old end of a cached partial page and a write past it,
// or exposed again after a truncate down within a page, read as zeros:
// never what the cache page held there before.
TEST_F(DataOpsTest, GapsReadAsZeros) {
  const std::string data = random_bytes(4000, 410);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), kPage, 0));  // the partial page is cached
  ASSERT_SYS(::ftruncate(fd.get(), 100));
  pwrite_all(fd.get(), "y", 200);  // inside the same page: [100, 200) is a gap
  std::string model = data.substr(0, 100) + std::string(100, '\0') + "y";
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), kPage, 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  pwrite_all(fd.get(), "x", 5000);  // the next page: [201, 5000) is a gap
  model.resize(5000, '\0');
  model += "x";
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), 2 * kPage, 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  // Reads at and past the end.
  EXPECT_EQ(pread_str(fd.get(), 10, 5001), "");
  EXPECT_EQ(pread_str(fd.get(), 10, 1 << 30), "");
  EXPECT_EQ(pread_str(fd.get(), 10, 4998), std::string("\0\0x", 3));
}

// Offsets past 2 GiB and 4 GiB (sparse), and zero-length reads and writes.
TEST_F(DataOpsTest, LargeOffsetsAndZeroLengths) {
  Fd fd(m("f"), O_RDWR | O_CREAT, 0644);
  std::string model;
  for (off_t off : {off_t(1) << 31, (off_t(1) << 32) - 3, (off_t(5) << 30) + 4093}) {
    SCOPED_TRACE("write at " + std::to_string(off));
    const std::string data = random_bytes(kPage + 7, static_cast<std::uint64_t>(off));
    pwrite_all(fd.get(), data, off - 5);
    EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size() + 100, off - 5));
    Fd bf(b("f"), O_RDONLY);
    EXPECT_BYTES_EQ(data, pread_str(bf.get(), data.size(), off - 5));
    EXPECT_EQ(pread_str(fd.get(), 5, off - 10), std::string(5, '\0'));
  }
  const off_t size = (off_t(5) << 30) + 4093 - 5 + kPage + 7;
  EXPECT_EQ(lstat_or_throw(m("f")).st_size, size);
  EXPECT_EQ(lstat_or_throw(b("f")).st_size, size);
  EXPECT_EQ(::pwrite(fd.get(), "x", 0, 100), 0);
  EXPECT_EQ(::pwrite(fd.get(), "x", 0, size + 100), 0);
  EXPECT_EQ(lstat_or_throw(m("f")).st_size, size) << "a zero-length write changed the size";
  char c;
  EXPECT_EQ(::pread(fd.get(), &c, 0, 0), 0);
}

// Two descriptors appending records at once: every record lands whole,
// once, and the mount reads what the backing file holds.
TEST_F(DataOpsTest, ConcurrentAppenders) {
  write_file(m("log"), "");
  constexpr int kRecords = 200;
  constexpr std::size_t kRecord = 100;
  auto record = [](int writer, int i) {
    std::string r = "w" + std::to_string(writer) + "-" + std::to_string(i) + ":";
    r.resize(kRecord - 1, static_cast<char>('a' + writer));
    return r + "\n";
  };
  std::vector<std::thread> writers;
  std::vector<std::string> errors(2);
  for (int w = 0; w < 2; w++) {
    writers.emplace_back([&, w] {
      try {
        Fd fd(m("log"), O_WRONLY | O_APPEND);
        for (int i = 0; i < kRecords; i++) {
          std::string r = record(w, i);
          if (::write(fd.get(), r.data(), r.size()) != static_cast<ssize_t>(r.size())) {
            throw_errno("append");
          }
        }
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(errors, std::vector<std::string>(2));
  const std::string got = read_file(m("log"));
  EXPECT_BYTES_EQ(read_file(b("log")), got);
  ASSERT_EQ(got.size(), 2 * kRecords * kRecord);
  std::set<std::string> seen;
  for (std::size_t off = 0; off < got.size(); off += kRecord) {
    std::string r = got.substr(off, kRecord);
    EXPECT_TRUE(seen.insert(r).second) << "record twice: " << r;
  }
  for (int w = 0; w < 2; w++) {
    for (int i = 0; i < kRecords; i++) EXPECT_EQ(seen.count(record(w, i)), 1u) << w << "-" << i;
  }
}

// A hot read, then close at once, over and over from several threads:
// the release of a handle may run while the read that came just before is
// still finishing in the daemon (after its reply).  Under ASan a touch of
// the freed handle aborts the daemon; the teardown reports its exit.
TEST_F(DataOpsTest, ShortLivedDescriptors) {
  const std::string data = random_bytes(3 * kPage, 411);
  write_file(m("f"), data);
  EXPECT_BYTES_EQ(data, read_file(m("f")));
  // More threads than cores, so that a daemon thread is often preempted
  // between its reply and its return; each reads to EOF (the last read
  // returns 0 and the close follows at once) like cat.
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      try {
        // Reads of 64 KiB: the zero-copy reply (reply=auto) takes reads
        // of a page or more.
        std::string buf(64 * 1024, '\0');
        for (int i = 0; i < 1000; i++) {
          Fd fd(m("f"), O_RDONLY);
          std::size_t off = (i * 997u + t * 4096u) % data.size();
          ssize_t n =
              must(::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(off)), "pread");
          if (n != static_cast<ssize_t>(data.size() - off) ||
              buf.compare(0, static_cast<std::size_t>(n), data, off) != 0) {
            throw std::runtime_error("wrong bytes at " + std::to_string(off));
          }
          if (must(::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(data.size())),
                   "pread at EOF") != 0) {
            throw std::runtime_error("bytes past the end");
          }
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors, std::vector<std::string>(kThreads));
}

// Punched bytes read as zeros through the mount although they were cached.
TEST_F(DataOpsTest, PunchHoleZeroesCachedBytes) {
  const std::string data = random_bytes(5 * kPage + 100, 402);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));  // every page cached
  std::string model = data;
  struct Range {
    off_t off, len;
  };
  for (Range r : {Range{off_t(kPage + 100), off_t(2 * kPage - 93)},  // unaligned both ends
                  Range{0, off_t(kPage)},                            // one whole page
                  Range{off_t(4 * kPage + 5), off_t(10)},            // inside a page
                  Range{off_t(5 * kPage), off_t(kMiB)}}) {           // past EOF
    SCOPED_TRACE("punch " + std::to_string(r.len) + " at " + std::to_string(r.off));
    ASSERT_SYS(::fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, r.off, r.len));
    for (off_t i = r.off; i < std::min<off_t>(r.off + r.len, model.size()); i++) model[i] = '\0';
    struct stat st {};
    ASSERT_SYS(::fstat(fd.get(), &st));
    EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
    EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 10, 0));
    EXPECT_BYTES_EQ(model, read_file(m("f")));
    EXPECT_BYTES_EQ(model, read_file(b("f")));
  }
  EXPECT_ERRNO(EOPNOTSUPP, ::fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE, 0, 10));  // needs KEEP_SIZE
}

TEST_F(DataOpsTest, ZeroRange) {
  const std::string data = random_bytes(4 * kPage + 1, 403);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  std::string model = data;
  ASSERT_SYS(::fallocate(fd.get(), FALLOC_FL_ZERO_RANGE, 3, 2 * kPage));
  for (std::size_t i = 3; i < 3 + 2 * kPage; i++) model[i] = '\0';
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 10, 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  // Past EOF without KEEP_SIZE: the file grows by zeros.
  ASSERT_SYS(::fallocate(fd.get(), FALLOC_FL_ZERO_RANGE, 4 * kPage - 10, 2 * kPage));
  for (std::size_t i = 4 * kPage - 10; i < model.size(); i++) model[i] = '\0';
  model.resize(6 * kPage - 10, '\0');
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 10, 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  // With KEEP_SIZE past EOF: no growth.
  ASSERT_SYS(::fallocate(fd.get(), FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 10 * kPage));
  model.assign(model.size(), '\0');
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 10, 0));
}

// SEEK_DATA/SEEK_HOLE through the mount answer what the backing file does.
TEST_F(DataOpsTest, SeekDataAndHoleOnSparseFile) {
  {
    Fd f(b("sparse"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    pwrite_all(f.get(), random_bytes(kPage, 404), 0);
    pwrite_all(f.get(), random_bytes(kPage, 405), kMiB);
    ASSERT_SYS(::ftruncate(f.get(), 2 * kMiB));
    ASSERT_SYS(::fsync(f.get()));
  }
  Fd mf(m("sparse"), O_RDONLY);
  Fd bf(b("sparse"), O_RDONLY);
  // The backing fs must see the holes, or there is nothing to compare.
  ASSERT_EQ(::lseek(bf.get(), 0, SEEK_HOLE), off_t(kPage)) << "backing fs reports no hole";
  for (off_t off : {off_t(0), off_t(1), off_t(kPage - 1), off_t(kPage), off_t(5000),
                    off_t(kMiB - 1), off_t(kMiB), off_t(kMiB + kPage - 1), off_t(kMiB + kPage),
                    off_t(2 * kMiB - 1), off_t(2 * kMiB), off_t(3 * kMiB)}) {
    for (int whence : {SEEK_DATA, SEEK_HOLE}) {
      errno = 0;
      off_t want = ::lseek(bf.get(), off, whence);
      int want_errno = errno;
      errno = 0;
      off_t got = ::lseek(mf.get(), off, whence);
      int got_errno = errno;
      EXPECT_EQ(got, want) << (whence == SEEK_DATA ? "SEEK_DATA" : "SEEK_HOLE") << " from " << off;
      if (want < 0) {
        EXPECT_EQ(got_errno, want_errno)
            << errno_name(got_errno) << " vs " << errno_name(want_errno) << " from " << off;
      }
    }
  }
  EXPECT_EQ(::lseek(mf.get(), 0, SEEK_END), off_t(2 * kMiB));
  EXPECT_EQ(::lseek(mf.get(), -10, SEEK_CUR), off_t(2 * kMiB - 10));
  // A hole punched through the mount is a hole.
  Fd rw(m("sparse"), O_RDWR);
  ASSERT_SYS(::fallocate(rw.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB, kPage));
  EXPECT_EQ(::lseek(mf.get(), kPage, SEEK_DATA), -1);
  EXPECT_EQ(errno, ENXIO) << errno_name(errno);
}

// copy_file_range: bytes and size right, and the destination's cached
// pages are not stale afterwards.
TEST_F(DataOpsTest, CopyFileRange) {
  const std::string src = random_bytes(300 * 1024 + 7, 406);
  const std::string dst = random_bytes(50 * 1024, 407);
  write_file(m("src"), src);
  write_file(m("dst"), dst);
  Fd in(m("src"), O_RDONLY);
  Fd out(m("dst"), O_RDWR);
  EXPECT_BYTES_EQ(dst, pread_str(out.get(), dst.size(), 0));  // dst cached before
  std::string model = dst;
  auto copy = [&](off_t in_off, off_t out_off, std::size_t len) {
    std::size_t done = 0;
    while (done < len) {
      off_t io = in_off + static_cast<off_t>(done), oo = out_off + static_cast<off_t>(done);
      ssize_t n = ::copy_file_range(in.get(), &io, out.get(), &oo, len - done, 0);
      if (n < 0) throw_errno("copy_file_range");
      if (n == 0) break;  // EOF of the source
      done += static_cast<std::size_t>(n);
    }
    return done;
  };
  ASSERT_EQ(copy(100, 5000, 70000), 70000u);
  model_write(model, src.substr(100, 70000), 5000);
  EXPECT_EQ(lstat_or_throw(m("dst")).st_size, static_cast<off_t>(model.size()));
  EXPECT_BYTES_EQ(model, pread_str(out.get(), model.size() + 10, 0));
  EXPECT_BYTES_EQ(model, read_file(b("dst")));
  // Past the destination's end, page-aligned and large.
  ASSERT_EQ(copy(0, 200 * 1024, src.size()), src.size());
  model_write(model, src, 200 * 1024);
  EXPECT_BYTES_EQ(model, pread_str(out.get(), model.size() + 10, 0));
  EXPECT_BYTES_EQ(model, read_file(b("dst")));
  // Past the source's end: a short copy.
  EXPECT_EQ(copy(static_cast<off_t>(src.size() - 10), 0, 100), 10u);
  model_write(model, src.substr(src.size() - 10), 0);
  EXPECT_BYTES_EQ(model, pread_str(out.get(), model.size() + 10, 0));
  EXPECT_BYTES_EQ(model, read_file(b("dst")));
}

}  // namespace
}  // namespace norefs::fs::test
