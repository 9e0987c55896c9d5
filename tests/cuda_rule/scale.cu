// A second tiny CUDA source: the rule must compile each source in its own action.
__global__ void scale(float alpha, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= alpha;
}
