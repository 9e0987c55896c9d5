// Stand-in for the consumer's own CUTLASS: only the version macros.
#pragma once
#define CUTLASS_MAJOR 3
#define CUTLASS_MINOR 5
