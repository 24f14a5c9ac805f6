// SPDX-License-Identifier: Apache-2.0
//! \file
//! Plans batches ahead on a background thread: while the trainer runs batch k,
//! batches k+1..k+lookahead are packed, ordered and scheduled. Results come back
//! in batch order, identical to calling the planning function synchronously.
//!
//!     dflop::async_planner planner([&](std::uint64_t batch) {
//!       const auto samples = sampler.batch(batch);                        // from (seed, batch) only
//!       return my_pipeline::schedule_batch(plan, samples, seed + batch);
//!     }, {.lookahead = 2});
//!     for (std::uint64_t k = 0; k < steps; ++k) executor.run(planner.next());
//!
//! Determinism contract: the planning function must be a pure function of the
//! batch index (derive every random choice from a seed and the index, e.g.
//! `random_generator(seed + index)`; read only data that does not change while the
//! planner lives, or copies). Then the result for each index is the same whatever
//! the thread timing. The function runs on the background thread only, one call
//! at a time, in index order.
#pragma once

#include <dflop/error.hpp>

#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace dflop {

//! Knobs of `async_planner`.
struct async_planner_options {
  //! Batches planned but not yet taken by `next()` (ready or being planned), >= 1.
  std::size_t lookahead = 2;
  std::uint64_t first_batch = 0;  //!< index of the first batch `next()` returns

  friend bool operator==(const async_planner_options&, const async_planner_options&) = default;
};

//! A planning function: `f(batch_index)` or, to stop early when the planner is
//! destroyed, `f(batch_index, std::stop_token)`; returns a movable result.
template <class Function>
concept batch_planning_function =
    std::invocable<Function&, std::uint64_t> || std::invocable<Function&, std::uint64_t, std::stop_token>;

namespace detail {
//! The result type of a planning function (void when it is none).
template <class Function>
struct planning_result {
  using type = void;
};
template <class Function>
  requires std::invocable<Function&, std::uint64_t, std::stop_token>
struct planning_result<Function> {
  using type = std::invoke_result_t<Function&, std::uint64_t, std::stop_token>;
};
template <class Function>
  requires(std::invocable<Function&, std::uint64_t> && !std::invocable<Function&, std::uint64_t, std::stop_token>)
struct planning_result<Function> {
  using type = std::invoke_result_t<Function&, std::uint64_t>;
};
}  // namespace detail

//! Runs `Function` on a background thread for batch indices ahead of the consumer.
//! At most `lookahead` batches are planned and not yet consumed; `next()` returns
//! them in index order and rethrows, for the batch that failed, whatever the
//! function threw (later batches are still planned: each index stands alone).
//! The destructor stops and joins the thread; it waits only for the call in
//! progress (which a function taking a `std::stop_token` may cut short).
//! Not copyable or movable (the thread refers to it). `next()` is for one consumer thread.
template <class Function>
class async_planner {
  static_assert(batch_planning_function<Function>,
                "dflop::async_planner: the planning function must be callable as `f(std::uint64_t batch_index)` "
                "or `f(std::uint64_t batch_index, std::stop_token)`");

public:
  //! What one batch's planning returns.
  using result_type = typename detail::planning_result<Function>::type;
  static_assert(std::is_move_constructible_v<result_type> && !std::is_void_v<result_type>,
                "dflop::async_planner: the planning function must return a movable value");

  //! Starts planning batches `options.first_batch`, ... right away.
  //! \throws input_error when `options.lookahead` is 0.
  explicit async_planner(Function plan, async_planner_options options = {})
      : plan_(std::move(plan)), options_(checked(options)), next_batch_(options_.first_batch),
        worker_([this](std::stop_token stop) { run(std::move(stop)); }) {}

  async_planner(const async_planner&) = delete;
  async_planner& operator=(const async_planner&) = delete;

  //! Stops planning and joins the background thread (after its call in progress).
  ~async_planner() {
    worker_.request_stop();
    changed_.notify_all();
    // jthread's destructor joins.
  }

  //! The next batch's result, in index order, waiting for it when not ready yet.
  //! \throws whatever the planning function threw for this batch.
  result_type next() {
    entry taken;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !ready_.empty(); });
      taken = std::move(ready_.front());
      ready_.pop_front();
    }
    changed_.notify_all();
    ++next_batch_;
    if (taken.failure) std::rethrow_exception(taken.failure);
    return std::move(*taken.value);
  }

  //! The index of the batch the next `next()` returns.
  [[nodiscard]] std::uint64_t next_batch() const noexcept { return next_batch_; }
  //! The options in use.
  [[nodiscard]] const async_planner_options& options() const noexcept { return options_; }

private:
  struct entry {
    std::optional<result_type> value;
    std::exception_ptr failure;
  };

  static async_planner_options checked(async_planner_options options) {
    if (options.lookahead < 1)
      throw input_error("async_planner_options::lookahead", 0, "must be >= 1 (batches planned ahead), got 0");
    return options;
  }

  void run(std::stop_token stop) {
    for (std::uint64_t index = options_.first_batch; !stop.stop_requested(); ++index) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, stop, [&] { return ready_.size() < options_.lookahead; });
        if (stop.stop_requested()) return;
      }
      entry planned;
      try {
        if constexpr (std::invocable<Function&, std::uint64_t, std::stop_token>)
          planned.value.emplace(std::invoke(plan_, index, stop));
        else
          planned.value.emplace(std::invoke(plan_, index));
      } catch (...) {
        planned.failure = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        ready_.push_back(std::move(planned));
      }
      changed_.notify_all();
    }
  }

  Function plan_;
  async_planner_options options_;
  std::uint64_t next_batch_;  // consumer side only
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::deque<entry> ready_;
  std::jthread worker_;  // last: starts after every other member exists, stops first
};

}  // namespace dflop
