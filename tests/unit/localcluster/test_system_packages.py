"""localcluster/base/system_packages.txt is the one table of system packages: hack/system-packages.sh installs every
row, and the real nodes' preflight and `hack/images` check their own rows, naming the package of each
missing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HACK = REPO / "hack"
sys.path.insert(0, str(REPO))

from localcluster.base import system_packages  # noqa: E402
from localcluster.images import tools  # noqa: E402
from localcluster.realnodes import preflight  # noqa: E402


def test_every_row_has_a_command_a_package_and_who_needs_it():
    assert {who for _, _, who in system_packages.table()} == set(system_packages.NEEDED_BY)


@pytest.mark.parametrize("row", ["gcc gcc", "gcc gcc gpu", "gcc gcc real-nodes extra"])
def test_a_malformed_row_is_an_error_naming_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: str):
    table = tmp_path / "system_packages.txt"
    table.write_text(f"# comment\nip iproute2 real-nodes  # why\n{row}\n")
    monkeypatch.setattr(system_packages, "TABLE", table)
    with pytest.raises(ValueError, match=f"line 3: '{row}'; expected"):
        system_packages.table()


def test_the_shell_installer_reads_the_same_rows_as_the_python_checks():
    # The installer's table, printed by its own parsing loop (the script up to its first check).
    script = (HACK / "system-packages.sh").read_text()
    print_table = 'for k in "${!PACKAGE_OF[@]}"; do echo "$k ${PACKAGE_OF[$k]}"; done\n'
    parse = script[:script.index("for tool in python3 go")] + print_table
    out = subprocess.run(["bash", "-c", parse, str(HACK / "system-packages.sh")], capture_output=True, text=True,
                         check=True).stdout
    shell = dict(line.split() for line in out.splitlines())
    assert shell == {item: package for item, package, _ in system_packages.table()}


def test_each_part_checks_its_own_rows():
    assert {"containerd", "containerd-shim-runc-v2", "/usr/lib/cni/portmap", "/bin/busybox"} <= set(
        system_packages.rows("real-nodes"))
    assert {"buildah", "mmdebstrap", "go"} == set(tools.REQUIRED)
    with pytest.raises(ValueError, match="no row needed by 'gpu'"):
        system_packages.rows("gpu")


def test_a_missing_row_is_named_by_its_package(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(system_packages, "present", lambda item: item not in {"conntrack", "/usr/lib/cni/bridge"})
    assert system_packages.missing_packages("real-nodes") == ["conntrack", "containernetworking-plugins"]
    found = preflight.problems([])
    assert any("missing Debian packages: conntrack containernetworking-plugins" in p for p in found), found
