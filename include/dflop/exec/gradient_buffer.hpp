// SPDX-License-Identifier: Apache-2.0
//! \file
//! A stage's gradient memory as the data-parallel all-reduce sees it: a typed
//! pointer and a count, in host or device memory (whichever the communicator moves).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <type_traits>

namespace dflop {

//! Element type of a gradient buffer (what the all-reduce sums).
enum class element_type : std::uint8_t {
  float32,  //!< float
  float64,  //!< double
};

//! Bytes of one element of `type`.
[[nodiscard]] constexpr std::size_t element_size(element_type type) noexcept {
  return type == element_type::float32 ? 4 : 8;
}

//! One gradient array to sum over the data-parallel group.
struct gradient_buffer {
  void* data = nullptr;                        //!< first element (host or device memory)
  std::size_t count = 0;                       //!< number of elements
  element_type type = element_type::float64;  //!< what the elements are

  //! A buffer over `values`.
  [[nodiscard]] static gradient_buffer of(std::span<double> values) noexcept {
    return {values.data(), values.size(), element_type::float64};
  }
  //! A buffer over `values`.
  [[nodiscard]] static gradient_buffer of(std::span<float> values) noexcept {
    return {values.data(), values.size(), element_type::float32};
  }
  //! Size in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return count * element_size(type); }
};

//! What a stage's `gradients()` may return: one `std::span<double>` or
//! `std::span<float>`, or a range of `gradient_buffer`s.
template <class T>
concept gradient_list = std::convertible_to<T, std::span<double>> || std::convertible_to<T, std::span<float>> ||
                        (std::ranges::input_range<T> &&
                         std::convertible_to<std::ranges::range_reference_t<T>, gradient_buffer>);

namespace detail {
//! Calls `visit(gradient_buffer)` for every buffer in `list`.
template <class List, class Visit>
void for_each_gradient(List&& list, Visit&& visit) {
  using type = std::remove_cvref_t<List>;
  if constexpr (std::convertible_to<type, std::span<double>>) visit(gradient_buffer::of(std::span<double>(list)));
  else if constexpr (std::convertible_to<type, std::span<float>>) visit(gradient_buffer::of(std::span<float>(list)));
  else
    for (auto&& buffer : list) visit(gradient_buffer(buffer));
}
}  // namespace detail

}  // namespace dflop
