// A tiny CUDA source for the cuda_library analysis tests; never compiled by them.
__global__ void axpy(float alpha, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i];
}
