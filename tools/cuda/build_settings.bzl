"""Build-setting rules for the CUDA flags (Bazel's own, so no bazel_skylib is needed)."""

BuildSettingInfo = provider(doc = "The value of a build setting.", fields = ["value"])

def _bool_flag_impl(ctx):
    return [BuildSettingInfo(value = ctx.build_setting_value)]

bool_flag = rule(
    implementation = _bool_flag_impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean flag set on the command line as --//pkg:name=true|false.",
)

def _string_flag_impl(ctx):
    if ctx.build_setting_value not in ctx.attr.values:
        fail("sparse_mla: --%s expected one of %s, got %r" % (ctx.label, ctx.attr.values, ctx.build_setting_value))
    return [BuildSettingInfo(value = ctx.build_setting_value)]

string_flag = rule(
    implementation = _string_flag_impl,
    build_setting = config.string(flag = True),
    attrs = {"values": attr.string_list(mandatory = True, doc = "The accepted values.")},
    doc = "A string flag with a fixed set of values, set as --//pkg:name=value.",
)
