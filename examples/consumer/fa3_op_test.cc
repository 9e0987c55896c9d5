// Linking @sparse_mla//cc:fa3 registers the torch op sparse_mla_fa3::fwd and provides FA3's mha_fwd.
#include <ATen/core/dispatch/Dispatcher.h>

#include <iostream>

#include "cc/fa3/fa3_api.h"

int main() {
  auto op = c10::Dispatcher::singleton().findSchema(c10::OperatorName("sparse_mla_fa3::fwd", ""));
  if (!op.has_value()) {
    std::cerr << "expected the torch op sparse_mla_fa3::fwd to be registered, it is not\n";
    return 1;
  }
  std::cout << "sparse_mla_fa3::fwd: " << op->schema() << "\nmha_fwd at " << reinterpret_cast<void*>(&mha_fwd) << "\n";
  return 0;
}
