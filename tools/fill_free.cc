// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/fill_free.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "alloc/stats_block.h"
#include "tools/sample_waiting.h"

namespace norefs::tools {

FillFreeResult run_fill_free(const FillFreeParams& p, const std::string& stats_path) {
  alloc::PagePoolConfig cfg = p.pool;
  cfg.stats_path = stats_path;
  FillFreeResult r;
  alloc::PagePool pool(cfg);
  alloc::StatsReader reader(stats_path);

  std::atomic<bool> go{false}, done{false};
  std::vector<std::uint64_t> pages(p.threads, 0), failures(p.threads, 0);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < p.threads; t++) {
    workers.emplace_back([&, t] {
      std::vector<alloc::Page*> held(p.fill_pages);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0, failed = 0;
      while (!done.load(std::memory_order_relaxed)) {
        std::size_t got = 0;
        for (; got < p.fill_pages; got++) {
          alloc::Page* pg = pool.alloc();
          if (!pg) {
            failed++;
            break;
          }
          pg->data[0] = std::byte{1};  // fault it in, like fallocate would
          held[got] = pg;
        }
        for (std::size_t i = 0; i < got; i++) {
          held[i]->set_rcu_free();  // it "left the index"
          pool.free(held[i]);
          pool.make_way();
        }
        n += got;
      }
      pages[t] = n;
      failures[t] = failed;
    });
  }

  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  WaitingSamples waited = sample_waiting(reader, p.sample_us, p.seconds);
  done.store(true, std::memory_order_relaxed);
  for (auto& w : workers) w.join();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (unsigned t = 0; t < p.threads; t++) {
    r.pages += pages[t];
    r.alloc_failures += failures[t];
  }
  r.pages_per_sec = static_cast<double>(r.pages) / r.seconds;
  r.samples = waited.samples;
  r.mean_waiting = waited.mean();
  r.peak_waiting = waited.peak;
  alloc::Counters c = reader.sum();
  r.grace_periods = c.grace_periods;
  r.expedites = c.expedites;
  r.make_way_yields = c.make_way_yields;
  pool.drain();
  return r;
}

}  // namespace norefs::tools
