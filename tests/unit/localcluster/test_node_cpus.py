"""A node's own CPUs (localcluster/emulation/node_cpus.py) on folders laid out as the cgroup files: the
label's parsing, the quota written in v1 and v2, the sweep moving a node's container processes in,
and the cgroup removed once the label goes. tests/integration/local_cluster/test_node_cpus.py checks the same on
the machine's real cgroups, with a pod's measured share of a core."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.emulation.node_cpus import PERIOD_US, CgroupUnavailable, CpuHierarchy, NodeCpus, parse_cores


@pytest.mark.parametrize("text, cores", [("0.4", 0.4), ("2", 2.0), ("0.1", 0.1)])
def test_the_label_is_a_number_of_cores(text: str, cores: float):
    assert parse_cores(text) == cores


@pytest.mark.parametrize("text", ["0", "-1", "0.05", "nan", "half", ""])
def test_a_label_under_a_tenth_of_a_core_or_not_a_number_is_refused_naming_it(text: str):
    with pytest.raises(ValueError, match=rf"kubetest2-training.local/cpus: {text!r} is not a number of cores of at "
                                         r"least 0\.1"):
        parse_cores(text)


def v1_root(tmp_path: Path) -> Path:
    root = tmp_path / "cpu"
    root.mkdir()
    (root / "cpu.cfs_quota_us").write_text("-1\n")
    return root


def test_the_v1_or_v2_cpu_hierarchy_is_found_and_a_machine_without_one_is_named(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    v1 = v1_root(tmp_path)
    assert CpuHierarchy.find(lambda: [tmp_path / "memory", v1]) == CpuHierarchy(v1, v2=False)
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    assert CpuHierarchy.find(lambda: [v2]) == CpuHierarchy(v2, v2=True)
    (v2 / "cgroup.controllers").write_text("memory\n")
    with pytest.raises(CgroupUnavailable, match="has no cpu controller"):
        CpuHierarchy.find(lambda: [v2])
    with pytest.raises(CgroupUnavailable, match=r"no cgroup cpu controller is mounted \(looked in none\)"):
        CpuHierarchy.find(list)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(CgroupUnavailable, match="needs root .* uid 1000"):
        CpuHierarchy.find(lambda: [v1])


def test_quotas_in_v1_and_v2_files(tmp_path: Path):
    v1 = CpuHierarchy(v1_root(tmp_path), v2=False)
    folder = v1.make("kt2t-x-nodes/n1")
    v1.set_quota(folder, 0.4)
    assert (folder / "cpu.cfs_period_us").read_text() == f"{PERIOD_US}\n"
    assert (folder / "cpu.cfs_quota_us").read_text() == f"{int(0.4 * PERIOD_US)}\n"
    assert v1.quota_cores(folder) == 0.4
    v1.set_quota(folder, None)
    assert v1.quota_cores(folder) is None

    v2 = CpuHierarchy(tmp_path / "unified", v2=True)
    v2.root.mkdir()
    folder = v2.make("kt2t-x-nodes/n1")
    assert (v2.root / "cgroup.subtree_control").read_text() == "+cpu\n"  # handed down at each level
    assert (v2.root / "kt2t-x-nodes" / "cgroup.subtree_control").read_text() == "+cpu\n"
    v2.set_quota(folder, 1.5)
    assert (folder / "cpu.max").read_text() == f"{int(1.5 * PERIOD_US)} {PERIOD_US}\n"
    assert v2.quota_cores(folder) == 1.5
    v2.set_quota(folder, None)
    assert (folder / "cpu.max").read_text() == f"max {PERIOD_US}\n" and v2.quota_cores(folder) is None


def test_a_limited_node_gets_its_containers_processes_and_loses_its_cgroup_once_the_label_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    hierarchy = CpuHierarchy(v1_root(tmp_path), v2=False)
    sessions = {"n1": [100], "n2": [200]}
    processes = {100: 100, 101: 100, 200: 200}  # pid -> session
    joined: list[tuple[str, int]] = []
    changes: list[tuple[str, float | None]] = []
    monkeypatch.setattr(CpuHierarchy, "join", staticmethod(lambda folder, pid: joined.append((folder.name, pid))))

    def members(wanted):
        return {pid: session for pid, session in processes.items() if session in wanted}

    cpus = NodeCpus("kt2t-x-nodes", lambda node: sessions.get(node, []),
                    lambda node, cores: changes.append((node, cores)), log=print, hierarchy=lambda: hierarchy,
                    members=members)
    cpus.set_limit("n1", 0.4)
    folder = hierarchy.root / "kt2t-x-nodes" / "n1"
    assert hierarchy.quota_cores(folder) == 0.4 and cpus.limit("n1") == 0.4 and cpus.limit("n2") is None
    assert sorted(joined) == [("n1", 100), ("n1", 101)]  # n2's processes stay where they are
    assert changes == [("n1", 0.4)]
    cpus.set_limit("n1", 0.4)  # unchanged: nothing recorded again
    assert changes == [("n1", 0.4)]
    cpus.set_limit("n1", None)
    assert hierarchy.quota_cores(folder) is None and changes[-1] == ("n1", None)
    assert folder.is_dir()  # the quota files stand for processes still inside: not removed yet
    for file in folder.iterdir():
        file.unlink()
    cpus.sweep()
    assert not folder.exists() and cpus.folders == {}
