"""The Go-test-compatible command line: `-x v`, `-x=v`, `--x=v`, `--x v`, bool flags alone.

Kept free of the kubernetes client (and of anything slow to import): kubetest2 runs
`<tester> --help` before every run, and `--help`/`--test.list` must answer at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config.settings import (
    E2E_FRAMEWORK,
    GO_TEST,
    KLOG,
    NO_EFFECT_SETTINGS,
    SETTINGS,
    SETTINGS_BY_FLAG,
    TRAINING,
    Setting,
    format_value,
)
from harness.errors import UsageError

HELP_FLAGS = frozenset({"-h", "--h", "-help", "--help"})

# What argv said: the raw value of each setting given as a flag, with how the flag was spelled.
FlagValues = dict[str, tuple[str, str]]


def wants_help(argv: Sequence[str]) -> bool:
    """kubetest2 probes `<tester> --help <args...>`; like Go's flag package, -h anywhere is help."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in HELP_FLAGS:
            return True
    return False


def parse_args(argv: Sequence[str]) -> FlagValues:
    """Parse argv; an unknown flag or a stray positional argument is a UsageError."""
    values: FlagValues = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if i < len(args):
                raise UsageError(f"unexpected argument {args[i]!r} after --: this binary takes flags only")
            break
        if not arg.startswith("-") or arg in ("-", "---"):
            raise UsageError(f"unexpected argument {arg!r}: this binary takes flags only (see --help)")
        name, has_value, value = arg.lstrip("-").partition("=")
        setting = SETTINGS_BY_FLAG.get(name)
        if setting is None:
            raise UsageError(f"flag provided but not defined: -{name} (see --help for the flags)")
        if not has_value:
            if setting.is_bool_flag:
                value = "true"
            elif i < len(args):
                value = args[i]
                i += 1
            else:
                raise UsageError(f"flag needs an argument: -{name}")
        values[setting.name] = (value, f"-{name}" if arg.count("-", 0, 2) == 1 else f"--{name}")
    return values


GROUP_TITLES = {GO_TEST: "Go test flags (-x v, -x=v and --x=v all work)",
                TRAINING: "Configuration (flag > env > discovered from the cluster > default)",
                E2E_FRAMEWORK: "e2e-framework flags (features are the subtests of upstream's tests)",
                KLOG: "klog flags"}


def _describe(setting: Setting) -> list[str]:
    """A setting's two usage lines: how it is spelled, then its help, default and expected form."""
    spelled = [f"--{f}" for f in setting.flags] + ([f"${setting.env}"] if setting.env else [])
    if setting.default not in (None, "", {}):
        default = f" (default {format_value(setting, setting.default)})"
    elif setting.default_factory is not None:
        default = f" (default {setting.default_origin})"
    else:
        default = ""
    return [f"  {', '.join(spelled)}", f"        {setting.help}{default}; {setting.expected}"]


def usage(binary: str, summary: str, tests: Sequence[str]) -> str:
    """The usage text, generated from the settings; `tests` are lines naming the tests and features."""
    lines = [f"Usage: {binary} [flags]", "", summary, "", "Tests (and their features, with labels):"]
    lines += [f"  {name}" for name in tests]
    for group, title in GROUP_TITLES.items():
        lines += ["", title + ":"]
        for setting in SETTINGS + NO_EFFECT_SETTINGS:
            if setting.group == group:
                lines += _describe(setting)
    lines += ["", "Exit status: 0 all tests passed or skipped, 1 a test failed or the selection matched no "
              "test (unless ALLOW_NO_TESTS=true), 2 usage or configuration error (nothing created in the "
              "cluster) or -test.timeout expired.",
              "Artifacts: $ARTIFACTS/junit_<binary>.xml and $ARTIFACTS/<binary>/<Test>/ (logs, "
              "manifests, events)."]
    return "\n".join(lines) + "\n"
