// The quantised products with 8-bit activations (llamanb_cpu_matmul_<fmt>_q8) in a translation
// unit of their own: matmul.cc compiled a second time with only those entry points. The build
// compiles units in parallel, and matmul.cc alone was most of a build's time (about 13 of 15 s
// on a 2-core machine); split, its two halves go to the two compiler processes.
#define LLAMANB_MATMUL_Q8_UNIT
#include "matmul.cc"
