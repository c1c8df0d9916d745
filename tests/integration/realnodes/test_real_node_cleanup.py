"""`down`, and `up` after a crash, remove everything real nodes made and nothing else: a cluster of its
own (own state folder and ports) with one real node and a running pod is killed (`kill -9` of every
process it has, containers included), brought up again, then down; afterwards no network namespace,
mount, cgroup or process of it is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from ..conftest import LOCAL_CLUSTER, REPO, wait_for
from ..local_cluster.test_pod_execution import pid_alive

sys.path.insert(0, str(REPO))
from localcluster.base import linux
from localcluster.base.layout import ClusterLayout

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

TEST_IMAGE = "kubetest2-training.local/busybox:local"


def local_cluster(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([str(LOCAL_CLUSTER), *args], capture_output=True, text=True, env=env, timeout=900,
                            check=False)
    assert result.returncode == 0, f"hack/local-cluster {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout


def leftovers(layout: ClusterLayout) -> dict[str, list[str]]:
    """Everything of the cluster the kernel still has: namespaces, mounts, cgroups, processes."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    state = str(layout.state_dir)
    processes = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state in cmdline and stat != "Z":
                processes.append(f"{proc.name} {cmdline[:120]}")
    return {
        "namespaces": [line for line in namespaces.splitlines() if line.startswith(layout.prefix)],
        "mounts": [str(m) for m in linux.mounts_under(layout.state_dir)],
        "cgroups": [str(h / layout.cgroup) for h in linux.cgroup_hierarchies() if (h / layout.cgroup).exists()],
        "processes": processes,
        "files": [str(p) for p in Path("/run").glob(f"{layout.prefix}*")],
    }


def crash(layout: ClusterLayout) -> set[int]:
    """SIGKILL every process the cluster started (pid files) and every process of its real nodes;
    the pids signalled."""
    pids = set(linux.cgroup_pids(layout.cgroup))
    for pid_file in (layout.state_dir / "run").glob("*.pid"):
        pids.add(int(pid_file.read_text()))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


@pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root")
def test_up_after_a_crash_then_down_leaves_nothing_behind(tmp_path: Path):
    offset = int(os.environ.get("KT2T_PORT_OFFSET", "0")) + 300
    state = tmp_path / "state"
    env = {**os.environ, "KT2T_STATE": str(state), "KT2T_PORT_OFFSET": str(offset), "KT2T_NODE_COUNT": "1"}
    env.pop("KT2T_REAL_NODES", None)
    layout = ClusterLayout(state)
    netns_dir_before = linux.NETNS_DIR.exists()
    try:
        kubeconfig = local_cluster(env, "up", "--real-nodes", "1").strip().splitlines()[-1]
        api = config.new_client_from_config(config_file=kubeconfig)
        core = client.CoreV1Api(api)
        wait_for(lambda: core.read_namespaced_service_account("default", "default"), 60, "default ServiceAccount")
        core.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
            "spec": {"nodeName": "real-cpu-0", "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}})
        wait_for(lambda: core.read_namespaced_pod("sleeper", "default").status.phase == "Running", 90, "sleeper")
        before = leftovers(layout)
        assert len(before["namespaces"]) == 2 and before["cgroups"] and before["processes"], before
        assert before["mounts"] == [], "the nodes' mounts belong in their holders' mount namespaces"

        killed = crash(layout)
        assert len(killed) > 8, killed
        # `up` after the crash, not during it: the killed processes are gone (a fixed 1 s before).
        wait_for(lambda: not any(pid_alive(pid) for pid in killed), 60, "the killed processes to end")
        local_cluster(env, "up")  # the real node comes back from nothing: same names, new processes
        wait_for(lambda: core.read_namespaced_pod("sleeper", "default").status.phase == "Running", 90,
                 "sleeper running again after the crash")
        api.close()
    finally:
        local_cluster(env, "down")
    assert not state.exists()
    assert leftovers(layout) == {"namespaces": [], "mounts": [], "cgroups": [], "processes": [], "files": []}
    # iproute2's /run/netns: removed when this cluster made it and no one else's namespace is in it,
    # kept when it was there before (other clusters', or the machine's, namespaces live in it).
    others = linux.NETNS_DIR.exists() and any(linux.NETNS_DIR.iterdir())
    if netns_dir_before:
        assert linux.NETNS_DIR.is_dir(), "down removed /run/netns, which was there before up"
    elif not others:
        assert not linux.NETNS_DIR.exists(), "down left /run/netns, which this cluster's up made"
        assert linux.NETNS_DIR not in linux.mounts_under(linux.NETNS_DIR.parent), "down left /run/netns mounted"
