"""SGLang's FlashAttention-3 fork (sgl-attn), the `hopper/` sources of its FA3 kernel.

Pin: the commit and archive checksum SGLang's own sgl-kernel build uses
(sgl-kernel/CMakeLists.txt, FetchContent of repo-flash-attention). Recompute the checksum with
`curl -L <url> | sha256sum`. The repository is also published as sgl-project/sgl-flash-attn; the
archive's top folder follows the current name, so pinned_source_repository finds it instead of
deriving it.
Local override: SGL_ATTN_SRC_DIR=/abs/path/to/a/checkout (needs hopper/flash_api.cpp).
Downloaded only with SPARSE_MLA_ENABLE_CUDA=1 (--config=sm90); placeholders otherwise.
"""

load("//cc/fa3:fa3_config.bzl", "FA3_UPSTREAM_FILES")
load("//third_party:pinned_source.bzl", "pinned_source_repository")

SGL_ATTN_COMMIT = "bcf72ccc6816b36a5fae2c5a3c027604629785e0"
SGL_ATTN_SHA256 = "2110d8ca1ed9b330b9f99c1d4088be12a37e44152c39fdf90dfb6526f532ba96"

def sgl_attn_repository(name):
    pinned_source_repository(
        name = name,
        urls = ["https://github.com/sgl-project/sgl-attn/archive/%s.tar.gz" % SGL_ATTN_COMMIT],
        sha256 = SGL_ATTN_SHA256,
        local_env = "SGL_ATTN_SRC_DIR",
        required_paths = ["hopper/flash_api.cpp", "hopper/instantiations"],
        placeholder_paths = [label.split("//:", 1)[1] for label in FA3_UPSTREAM_FILES],
        build_file = Label("//third_party/sgl_attn:sgl_attn.BUILD"),
    )
