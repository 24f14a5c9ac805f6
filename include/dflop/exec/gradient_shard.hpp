// SPDX-License-Identifier: Apache-2.0
//! \file
//! How a gradient buffer is split over a data-parallel group for the distributed
//! optimizer (ZeRO-1, Megatron-LM's distributed optimizer): each member sums and
//! updates only its shard, then the members gather each other's updated shards.
//! With n members and c elements, member i's shard is [i q, (i + 1) q) for
//! q = floor(c / n); the last c - n q elements (fewer than n) are every member's
//! (summed and updated everywhere alike), so no buffer needs padding.
#pragma once

#include <cstddef>

namespace dflop {

//! One member's elements of a buffer split over a group (see the file comment).
struct gradient_shard {
  std::size_t begin = 0;       //!< first element of the member's own shard
  std::size_t end = 0;         //!< one past its last
  std::size_t common_begin = 0;  //!< first element every member holds (the remainder)
  std::size_t count = 0;         //!< the buffer's elements (the remainder ends here)

  friend bool operator==(const gradient_shard&, const gradient_shard&) = default;
};

//! Member `member`'s shard of `count` elements split over `members` (>= 1).
[[nodiscard]] constexpr gradient_shard shard_of(std::size_t count, int members, int member) noexcept {
  const auto n = static_cast<std::size_t>(members < 1 ? 1 : members);
  const std::size_t q = count / n;
  const auto i = static_cast<std::size_t>(member < 0 ? 0 : member);
  return {i * q, (i + 1) * q, n * q, count};
}

}  // namespace dflop
