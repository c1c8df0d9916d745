"""The Go-test-compatible command line: `-x v`, `-x=v`, `--x=v`, `--x v`, bool flags alone.

Kept free of the kubernetes client (and of anything slow to import): kubetest2 runs
`<tester> --help` before every run, and `--help`/`--test.list` must answer at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.config import E2E_FRAMEWORK, GO_TEST, SETTINGS, SETTINGS_BY_FLAG, Setting, format_value
from harness.errors import UsageError

HELP_FLAGS = frozenset({"-h", "--h", "-help", "--help"})


@dataclass
class CommandLine:
    """What argv said: the raw flag values by setting name (with how each flag was spelled)."""

    flag_values: dict[str, tuple[str, str]]
    help_requested: bool = False


def wants_help(argv: Sequence[str]) -> bool:
    """kubetest2 probes `<tester> --help <args...>`; like Go's flag package, -h anywhere is help."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in HELP_FLAGS:
            return True
    return False


def parse_args(argv: Sequence[str], extra_flags: Sequence[Setting] = ()) -> CommandLine:
    """Parse argv; an unknown flag or a stray positional argument is a UsageError."""
    known = dict(SETTINGS_BY_FLAG)
    known.update({flag: s for s in extra_flags for flag in s.flags})
    values: dict[str, tuple[str, str]] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if i < len(args):
                raise UsageError(f"unexpected argument {args[i]!r} after --: this binary takes flags only")
            break
        if arg in HELP_FLAGS:
            return CommandLine(values, help_requested=True)
        if not arg.startswith("-") or arg in ("-", "---"):
            raise UsageError(f"unexpected argument {arg!r}: this binary takes flags only (see --help)")
        name, has_value, value = arg.lstrip("-").partition("=")
        setting = known.get(name)
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
    return CommandLine(values)


def usage(binary: str, summary: str, tests: Sequence[str], extra_flags: Sequence[Setting] = ()) -> str:
    """The usage text, generated from the settings table."""
    lines = [f"Usage: {binary} [flags]", "", summary, "", "Tests:"]
    lines += [f"  {name}" for name in tests]
    groups: dict[str, list[Setting]] = {}
    for setting in (*SETTINGS, *extra_flags):
        groups.setdefault(setting.group, []).append(setting)
    titles = {GO_TEST: "Go test flags (-x v, -x=v and --x=v all work)",
              "config": "Configuration (flag > env > discovered from the cluster > default)",
              E2E_FRAMEWORK: E2E_FRAMEWORK}
    for group, settings in groups.items():
        lines += ["", titles.get(group, group) + ":"]
        for setting in settings:
            spelled = [f"--{f}" for f in setting.flags] + ([f"${setting.env}"] if setting.env else [])
            default = ("" if setting.default in (None, "", {})
                       else f" (default {format_value(setting, setting.default)})")
            lines.append(f"  {', '.join(spelled)}")
            lines.append(f"        {setting.help}{default}; {setting.expected}")
    lines += ["", "Exit status: 0 all tests passed or skipped, 1 a test failed, 2 usage or "
              "configuration error (nothing created in the cluster).",
              "Artifacts: $ARTIFACTS/junit_<binary>.xml and $ARTIFACTS/<binary>/<Test>/ (logs, "
              "manifests, events)."]
    return "\n".join(lines) + "\n"
