"""`analysis_verdict`: the executable of a test whose checks ran at analysis time."""

def analysis_verdict(ctx, errors):
    """Writes `<name>.sh`, which prints each error as a FAIL line and exits 1 if there is any.

    Args:
      ctx: the test rule's context.
      errors: list of string, what the analysis found wrong (empty: the test passes).

    Returns:
      The DefaultInfo to return, with the script as the executable.
    """
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    lines = ["#!/bin/sh"] + ["echo %r" % ("FAIL " + str(ctx.label) + ": " + e) for e in errors]
    lines.append("exit %d" % (1 if errors else 0))
    ctx.actions.write(script, "\n".join(lines) + "\n", is_executable = True)
    return DefaultInfo(executable = script)
