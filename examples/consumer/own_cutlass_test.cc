// The consumer's @cutlass is the one its targets see, next to sparse_mla's @sparse_mla_cutlass.
#include <cutlass/version.h>

static_assert(CUTLASS_MAJOR == 3 && CUTLASS_MINOR == 5, "expected the consumer's own CUTLASS 3.5 stand-in");

int main() { return 0; }
