// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/sync_point.h — named points where a test can hold a thread to force
// an interleaving (style.md, practice 10).  Compiled in only with the CMake
// option NOREFS_SYNC_POINTS (the test builds); elsewhere a point is nothing.
//
//   sync_point::set("read:fast:before_copy", [&] { ...block here... });
//   ... run the code under test ...
//   sync_point::clear();
//
// Points in the cache (the daemon's debug_read_delay_us sleeps at the two
// that are inside the read-side section, docs/races.md):
//   read:fast:before_copy   fast path, page found and checked, not yet copied
//                           (inside the read-side section)
//   read:slow:before_copy   reference path, page held, not yet copied
//   read:stackcopy:before_copy  stackcopy, page found and checked, not yet
//                           copied to the stack (inside the section)
//   remove:after_unlink     a removal unlinked a page, not yet freed
#pragma once

#include <functional>
#include <string_view>

namespace norefs::cache::sync_point {

#ifdef NOREFS_SYNC_POINTS
inline constexpr bool kEnabled = true;
void hit(std::string_view name);
#else
inline constexpr bool kEnabled = false;
inline void hit(std::string_view) {}
#endif

// Installs `fn` for `name` (replacing any), called by every thread that
// reaches the point until clear().  Context: no thread is inside a callback.
void set(std::string_view name, std::function<void()> fn);
void clear();

}  // namespace norefs::cache::sync_point
