// SPDX-License-Identifier: Apache-2.0
// A user's program: includes the umbrella header and uses the library.
#include <dflop/dflop.hpp>

#include <iostream>

int main() {
  const dflop::sample image{"img-0", dflop::modality::image, 5, 5 * 729, 4 * 729 + 2};
  if (auto problem = dflop::find_inconsistency(image)) {
    std::cerr << "unexpected: " << *problem << "\n";
    return 1;
  }
  std::cout << "dflop consumer OK: " << image << "\n";
  return 0;
}
