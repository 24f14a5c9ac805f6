// SPDX-License-Identifier: Apache-2.0
//! \file
//! `parallel_for`: runs `body(index, worker)` for every index on a few threads.
//! Which thread runs which index varies from run to run, so callers write each
//! index's result to its own slot and combine the slots in index order: the
//! result is then the same for any thread count (the planner's determinism).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace dflop {

//! Threads to use when the caller asks for 0: the hardware's, at least 1.
[[nodiscard]] inline unsigned default_thread_count() noexcept {
  return std::max(1U, std::thread::hardware_concurrency());
}

//! Calls `body(index, worker)` for index in [0, count) on up to `threads` threads
//! (0: `default_thread_count()`); `worker` in [0, threads) names the calling
//! thread, for per-thread scratch. The calling thread works too. The first
//! exception thrown by any call is rethrown after every thread has stopped
//! (remaining indices are skipped).
template <class Body>
void parallel_for(std::size_t count, unsigned threads, Body&& body) {
  if (threads == 0) threads = default_thread_count();
  const auto workers = static_cast<unsigned>(std::min<std::size_t>(threads, count));
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) body(i, 0U);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::atomic_flag error_taken = ATOMIC_FLAG_INIT;
  const auto work = [&](unsigned worker) {
    for (std::size_t i = next.fetch_add(1); i < count && !failed.load(); i = next.fetch_add(1)) {
      try {
        body(i, worker);
      } catch (...) {
        if (!error_taken.test_and_set()) first_error = std::current_exception();
        failed.store(true);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (unsigned worker = 1; worker < workers; ++worker) pool.emplace_back(work, worker);
  work(0U);
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace dflop
