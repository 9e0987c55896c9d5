// Linking @sparse_mla//cc:decode registers the torch ops sparse_mla_decode::fwd and ::token_metadata.
#include <ATen/core/dispatch/Dispatcher.h>

#include <iostream>

int main() {
  for (const char* name : {"sparse_mla_decode::fwd", "sparse_mla_decode::token_metadata"}) {
    auto op = c10::Dispatcher::singleton().findSchema(c10::OperatorName(name, ""));
    if (!op.has_value()) {
      std::cerr << "expected the torch op " << name << " to be registered, it is not\n";
      return 1;
    }
    std::cout << name << ": " << op->schema() << "\n";
  }
  return 0;
}
