// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/inode.h"

#include <unistd.h>

#include "alloc/die.h"

namespace norefs::fs {

Inode::~Inode() {
  // The cache first: its pages go (not deferred) while the fd is still ours.
  cached.reset();
  close(fd);
}

InodeTable::InodeTable(int root_fd, const struct stat& root_st)
    : root_(std::make_unique<Inode>(root_fd, root_st.st_dev, root_st.st_ino,
                                    root_st.st_mode & S_IFMT)) {}

InodeTable::~InodeTable() = default;

Inode* InodeTable::lookup(int fd, const struct stat& st) {
  Key k{st.st_dev, st.st_ino};
  std::unique_lock lk(mu_);
  auto it = map_.find(k);
  if (it != map_.end()) {
    it->second->nlookup_++;
    Inode* in = it->second.get();
    lk.unlock();
    close(fd);
    return in;
  }
  auto in = std::make_unique<Inode>(fd, st.st_dev, st.st_ino, st.st_mode & S_IFMT);
  in->nlookup_ = 1;
  Inode* p = in.get();
  map_.emplace(k, std::move(in));
  return p;
}

std::unique_ptr<Inode> InodeTable::erase_if_unused_locked(Inode* in) {
  if (in->nlookup_ != 0 || in->nopen_ != 0) return nullptr;
  auto it = map_.find(Key{in->dev, in->ino});
  NOREFS_CHECK(it != map_.end() && it->second.get() == in, "inode not in the table");
  std::unique_ptr<Inode> dead = std::move(it->second);
  map_.erase(it);
  return dead;
}

std::unique_ptr<Inode> InodeTable::forget(Inode* in, std::uint64_t n) {
  if (in == root_.get()) return nullptr;  // the root is never forgotten
  std::lock_guard lk(mu_);
  // The kernel never forgets more than it looked up; if it did, clamp
  // rather than wrap (the inode then goes, as the kernel asked).
  in->nlookup_ -= std::min(n, in->nlookup_);
  return erase_if_unused_locked(in);
}

void InodeTable::open_ref(Inode* in) {
  if (in == root_.get()) return;
  std::lock_guard lk(mu_);
  in->nopen_++;
}

std::unique_ptr<Inode> InodeTable::open_unref(Inode* in) {
  if (in == root_.get()) return nullptr;
  std::lock_guard lk(mu_);
  NOREFS_CHECK(in->nopen_ > 0, "open count underflow");
  in->nopen_--;
  return erase_if_unused_locked(in);
}

void InodeTable::note_meta_change(dev_t dev, ino_t ino) {
  std::lock_guard lk(mu_);
  auto it = map_.find(Key{dev, ino});
  if (it == map_.end()) return;
  Inode& in = *it->second;
  in.meta_changed.store(true, std::memory_order_relaxed);
  struct stat st {};
  if (fstat(in.fd, &st) == 0 && st.st_nlink == 0) {
    in.unlinked_through_mount.store(true, std::memory_order_relaxed);
  }
}

std::vector<std::unique_ptr<Inode>> InodeTable::take_all() {
  std::vector<std::unique_ptr<Inode>> all;
  std::lock_guard lk(mu_);
  all.reserve(map_.size());
  for (auto& [k, in] : map_) all.push_back(std::move(in));
  map_.clear();
  return all;
}

std::size_t InodeTable::size() const {
  std::lock_guard lk(mu_);
  return map_.size();
}

}  // namespace norefs::fs
