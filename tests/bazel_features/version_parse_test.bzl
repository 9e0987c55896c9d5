"""`version_parse_test`: parse_bazel_version on the version strings Bazel builds report."""

load("//third_party/bazel:bazel_features.bzl", "parse_bazel_version")
load("//tools/testing:analysis_verdict.bzl", "analysis_verdict")

def _version_parse_test_impl(ctx):
    errors = []
    for version, expected in ctx.attr.cases.items():
        got = parse_bazel_version(version)
        expected_value = None if expected == "none" else tuple([int(x) for x in expected.split(".")])
        if got != expected_value:
            errors.append("parse_bazel_version(%r) = %r, expected %r" % (version, got, expected_value))
    return [analysis_verdict(ctx, errors)]

version_parse_test = rule(
    implementation = _version_parse_test_impl,
    test = True,
    doc = "Checks parse_bazel_version at analysis time; the test script reports what differs.",
    attrs = {"cases": attr.string_dict(mandatory = True, doc = "version string -> `major.minor`, or `none`.")},
)
