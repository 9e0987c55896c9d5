"""The CUDA toolkit as PyPI's wheels: nvcc, ptxas, cicc, the CUDA headers and cudart, pinned by sha256.

CUDA 13.0, the one PyTorch's CUDA 13.0 builds use: the versions are those that torch 2.14.1's
requirement cuda-toolkit==13.0.3 names for its extras nvcc, cudart and cccl; URLs and sha256 from
PyPI's index of each project. Each wheel unpacks under nvidia/cu13/ (bin/, nvvm/, include/, lib/),
so extracted into one folder they form a toolkit tree.
"""

CUDA_WHEELS_VERSION = "13.0"

_PYPI = "https://files.pythonhosted.org/packages/"

CUDA_WHEELS = [
    struct(
        name = "nvidia-cuda-nvcc 13.0.88",  # nvcc, ptxas, fatbinary, nvlink, cudafe++
        url = _PYPI + "71/8b/a546c12881fffeba927d810598987df25d74b8b241788c7db8dfc93b0173/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256 = "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03",
    ),
    struct(
        name = "nvidia-nvvm 13.0.88",  # cicc and libdevice
        url = _PYPI + "15/b0/ee41e6d1108d959b5097163e7190c2d0f7857dea75606ce358f0275891b4/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        sha256 = "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0",
    ),
    struct(
        name = "nvidia-cuda-crt 13.0.88",  # include/crt: the headers nvcc's front end includes
        url = _PYPI + "05/69/a1ec4d9f0747d85964206feb47bf359f48a2d6af74c0add8abba6efe3dda/nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256 = "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4",
    ),
    struct(
        name = "nvidia-cuda-runtime 13.0.96",  # the runtime headers and libcudart.so.13
        url = _PYPI + "2e/24/d1558f3b68b1d26e706813b1d10aa1d785e4698c425af8db8edc3dced472/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256 = "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
    ),
    struct(
        name = "nvidia-cuda-cccl 13.0.85",  # include/cccl: libcu++, CUB, Thrust
        url = _PYPI + "ab/fb/0384bb2129bed6b1b39f8e44471c615ab5ab29b7e55817538a1d390d8f84/nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256 = "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649",
    ),
]
