"""`pinned_source_repository`: an upstream source tree, pinned by checksum, with a local override.

Environment variables read (each declared in `environ`, so a change refetches; `--repo_env` sets them):
  the one named by the `local_env` attribute, e.g. SGL_ATTN_SRC_DIR or CUTLASS_SRC_DIR:
      an absolute path to a local tree with the same layout as the archive after its top folder.
      When set, nothing is downloaded; the tree is used as it is (the checksum does not apply), but
      where the rule names a version header (`version_file`, `version_defines`), a tree of another
      version stops the fetch with the found and the pinned version, not with a compile error later.
  SPARSE_MLA_ENABLE_CUDA: `1` lets the pinned archive be downloaded (--config=sm90 sets it beside
      --//tools/cuda:enable_cuda=true). Otherwise, and without a local tree, the repository holds
      placeholders: the `placeholder_paths` files, each an `#error` saying how to get the real
      sources. The CUDA sources are only compiled when CUDA is enabled, but `bazel query` and
      `bazel fetch` visit every branch of a `select`, so this keeps CPU machines from downloading them.

The archive's top folder is found, not named: GitHub names it after the repository's current
name (sgl-attn-<commit> or sgl-flash-attn-<commit>), so a fixed strip prefix would break on a rename.
Which source was used is printed when the repository is fetched and written to SOURCE.txt.
"""

_DOWNLOAD_DIR = "_archive"

ENABLE_CUDA_ENV = "SPARSE_MLA_ENABLE_CUDA"

def _fail(ctx, what, remedy):
    fail("sparse_mla: @%s: %s. %s" % (ctx.name, what, remedy))

def _link_children(ctx, src):
    for child in src.readdir():
        if child.basename not in ("BUILD", "BUILD.bazel", "WORKSPACE", "WORKSPACE.bazel"):
            ctx.symlink(child, child.basename)

def _use_local_tree(ctx, local_dir):
    src = ctx.path(local_dir)
    if not src.exists:
        _fail(ctx, "%s=%s does not exist" % (ctx.attr.local_env, local_dir), "Point it at an extracted source tree or unset it to download the pinned archive.")
    for required in ctx.attr.required_paths:
        if not ctx.path("%s/%s" % (src, required)).exists:
            _fail(ctx, "%s=%s has no %s" % (ctx.attr.local_env, local_dir, required), "The tree must have the layout of the pinned archive's top folder.")
    _check_version(ctx, src, local_dir)
    _link_children(ctx, src)
    return "local tree %s (%s)" % (local_dir, ctx.attr.local_env)

def _defined_values(text):
    """The values of the `#define NAME VALUE` lines of a header, by name."""
    values = {}
    for line in text.splitlines():
        words = [word for word in line.replace("\t", " ").split(" ") if word]
        if len(words) >= 3 and words[0] == "#define":
            values[words[1]] = words[2]
    return values

def _check_version(ctx, src, local_dir):
    if not ctx.attr.version_file:
        return
    header = "%s/%s" % (src, ctx.attr.version_file)
    found = _defined_values(ctx.read(header)) if ctx.path(header).exists else {}
    names = ctx.attr.version_defines.keys()
    if [found.get(name) for name in names] != [ctx.attr.version_defines[name] for name in names]:
        _fail(
            ctx,
            "%s=%s is version %s by its %s (%s), not the pinned %s" % (
                ctx.attr.local_env,
                local_dir,
                ".".join([found.get(name, "?") for name in names]),
                ctx.attr.version_file,
                ".".join(names),
                ".".join([ctx.attr.version_defines[name] for name in names]),
            ),
            "Point it at a tree of the pinned version (%s) or unset it to download the pinned archive." % ctx.attr.version_name,
        )

def _download(ctx):
    # Printed first: a failed download ends the fetch with Bazel's own error, which cannot name the override.
    print("sparse_mla: @%s: downloading %s; without network set %s to a local tree (README, 'Pinned sources')" % (  # buildifier: disable=print
        ctx.name,
        ctx.attr.urls[0],
        ctx.attr.local_env,
    ))
    ctx.download_and_extract(
        url = ctx.attr.urls,
        sha256 = ctx.attr.sha256,
        type = ctx.attr.archive_type,
        output = _DOWNLOAD_DIR,
    )
    top = ctx.path(_DOWNLOAD_DIR + "/" + ctx.attr.strip_prefix if ctx.attr.strip_prefix else _DOWNLOAD_DIR)
    if not ctx.attr.strip_prefix:
        children = top.readdir()
        if len(children) != 1:
            _fail(ctx, "the archive has %d top-level entries, expected one folder" % len(children), "Set strip_prefix for this archive.")
        top = children[0]
    for required in ctx.attr.required_paths:
        if not ctx.path("%s/%s" % (top, required)).exists:
            _fail(ctx, "the archive has no %s under its top folder" % required, "Check the pin in third_party/.")
    _link_children(ctx, top)
    return "%s (sha256 %s)" % (ctx.attr.urls[0], ctx.attr.sha256)

def _write_placeholders(ctx):
    message = ("sparse_mla: @%s holds placeholders, not the upstream sources: they are fetched for CUDA " +
               "builds only. Build with --config=sm90, which sets --repo_env=%s=1 beside " +
               "--@sparse_mla//tools/cuda:enable_cuda=true, or set %s to a local tree.") % (ctx.name, ENABLE_CUDA_ENV, ctx.attr.local_env)
    for path in ctx.attr.placeholder_paths:
        ctx.file(path, "#error \"%s\"\n" % message)
    return "placeholders (%s is not 1 and %s is not set)" % (ENABLE_CUDA_ENV, ctx.attr.local_env)

def _pinned_source_repository_impl(ctx):
    local_dir = ctx.os.environ.get(ctx.attr.local_env, "")
    if local_dir:
        source = _use_local_tree(ctx, local_dir)
    elif ctx.os.environ.get(ENABLE_CUDA_ENV, "") == "1":
        source = _download(ctx)
    else:
        source = _write_placeholders(ctx)
    print("sparse_mla: @%s from %s" % (ctx.name, source))  # buildifier: disable=print
    ctx.file("SOURCE.txt", source + "\n")
    ctx.symlink(ctx.attr.build_file, "BUILD.bazel")
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)

pinned_source_repository = repository_rule(
    implementation = _pinned_source_repository_impl,
    doc = "An upstream source tree pinned by sha256, overridable by a local tree (see module docstring).",
    attrs = {
        "urls": attr.string_list(mandatory = True, doc = "Archive URLs, tried in order."),
        "sha256": attr.string(mandatory = True, doc = "sha256 of the archive."),
        "archive_type": attr.string(default = "", doc = "Archive type when the URL does not tell (e.g. zip for a wheel)."),
        "strip_prefix": attr.string(default = "", doc = "Folder inside the archive to use; empty: its single top folder."),
        "local_env": attr.string(mandatory = True, doc = "Environment variable naming a local tree to use instead."),
        "required_paths": attr.string_list(default = [], doc = "Paths the tree must contain; checked with a clear error."),
        "version_file": attr.string(default = "", doc = "Header of a local tree whose `#define`s give its version; empty: not checked."),
        "version_defines": attr.string_dict(default = {}, doc = "The pinned value of each version macro of version_file, in order (major first)."),
        "version_name": attr.string(default = "", doc = "The pinned version as the error names it, e.g. 'CUTLASS 4.2.0, commit 57e3cfb4'."),
        "placeholder_paths": attr.string_list(default = [], doc = "Files the placeholder tree holds: every one the BUILD overlay's users name."),
        "build_file": attr.label(mandatory = True, allow_single_file = True, doc = "The BUILD overlay of ours."),
    },
    environ = ["SGL_ATTN_SRC_DIR", "CUTLASS_SRC_DIR", ENABLE_CUDA_ENV],
)
