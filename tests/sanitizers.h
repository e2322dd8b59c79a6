// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/sanitizers.h — which sanitizer this test binary is built with, for
// tests that scale their work down or skip a control under one.  (GCC
// defines __SANITIZE_*__; clang answers __has_feature.)
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define NOREFS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NOREFS_TEST_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define NOREFS_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NOREFS_TEST_TSAN 1
#endif
#endif
