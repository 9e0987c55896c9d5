"""The fixed nvcc flag set of every CUDA compile action. Nothing here comes from the environment."""

SM90A_GENCODE = ["-gencode", "arch=compute_90a,code=sm_90a"]
"""Hopper only: FA3 uses wgmma and setmaxnreg, which exist only in the sm_90a target."""

NVCC_FLAGS = SM90A_GENCODE + [
    "-std=c++17",
    "-O3",
    # Release build: device-code asserts compiled out. FA3's own hopper/setup.py passes it with the
    # comment "Important, otherwise performance is severely impacted".
    "-DNDEBUG",
    "--use_fast_math",
    "--expt-relaxed-constexpr",
    # Intermediate files beside the object, not in /tmp: there nvcc names them by its PID, which is
    # the same (2) in every linux-sandbox action, and parallel compiles clobbered each other's
    # ("cannot open module id file /tmp/tmpxft_00000002_...").
    "--objdir-as-tempdir",
    "-Xcompiler",
    "-fPIC",
]

ACTION_PATH = "/usr/bin:/bin"
"""PATH of the compile action: fixed, so the host's PATH never changes what nvcc runs."""
