"""kubetest2-tester-training: a kubetest2 tester plugin running the suites in-process.

    kubetest2 noop --kubeconfig=$KUBECONFIG --test=training -- --suite=e2e-nvidia --test.v

kubetest2 first probes `kubetest2-tester-training --help <args>`: usage on stdout, exit 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from harness.framework.cli import wants_help
from harness.framework.suite import Suite
from harness.runner import EXIT_USAGE
from harness.runner import main as run_suite
from testbins import e2e_nvidia_training
from testbins.suites import all_suites

SUITES: dict[str, Suite] = {s.binary: s for s in all_suites()}
DEFAULT_SUITE = e2e_nvidia_training.SUITE.binary


def split_suite_flag(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Take `--suite=a,b` / `-suite a` out of argv; the rest goes to each suite unchanged."""
    suites: list[str] = []
    rest: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, has_value, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name == "suite":
            if not has_value:
                value = args.pop(0) if args else ""
            suites += [s for s in value.split(",") if s]
        else:
            rest.append(arg)
    return suites or [DEFAULT_SUITE], rest


def usage() -> str:
    lines = ["Usage: kubetest2 <deployer> --test=training -- [--suite=NAME[,NAME]] [suite flags]", "",
             "Runs the kubetest2-training suites in-process; each writes $ARTIFACTS/junit_<suite>.xml.", "",
             f"  --suite   suites to run, comma-separated (default {DEFAULT_SUITE}): {', '.join(SUITES)}", ""]
    return "\n".join(lines) + "\n" + "\n".join(s.usage() for s in SUITES.values())


def run(argv: Sequence[str]) -> int:
    if wants_help(argv):
        sys.stdout.write(usage())
        return 0
    names, rest = split_suite_flag(argv)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        print(f"kubetest2-tester-training: usage error: unknown suite {', '.join(unknown)} "
              f"(expected one of {', '.join(SUITES)})", file=sys.stderr)
        return EXIT_USAGE
    # The worst exit wins: 2 (usage/configuration) > 1 (a test failed) > 0.
    return max(run_suite(SUITES[name], rest) for name in names)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
