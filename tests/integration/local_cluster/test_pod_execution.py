"""Pods that really run: the node agent executes their commands as local processes (hack/README.md).

Each test's workload is tiny (the machine has 2 shared cores): `sh` one-liners, one torchrun job of
two pods doing a gloo all-reduce.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.base.settings import Settings

from ..conftest import LocalCluster, wait_for, watch_pods

pytestmark = pytest.mark.integration

ANNOTATION = "kubetest2-training.local/"
IMAGE = "registry.invalid/stood-in-for:1"


def pod(name: str, script: str, restart_policy: str = "Never", env: list[client.V1EnvVar] | None = None,
        annotations: dict[str, str] | None = None, grace_s: int | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(restart_policy=restart_policy, termination_grace_period_seconds=grace_s, containers=[
            client.V1Container(name="main", image=IMAGE, command=["sh", "-c", script], env=env)]))


def terminated(p: client.V1Pod) -> bool:
    return p.status.phase in ("Succeeded", "Failed")


def wait_pod(cluster: LocalCluster, namespace: str, name: str, until, what: str, timeout_s: float = 60) -> client.V1Pod:
    return watch_pods(cluster.core, namespace, lambda p: p.metadata.name == name and until(p), timeout_s, what)


def pid_alive(pid: int) -> bool:
    """A zombie (exited, waiting for init to reap it) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_output_of_a_real_command_through_pods_log(cluster: LocalCluster, namespace: str):
    cluster.core.create_namespaced_pod(namespace, pod("hello", "echo out-line; echo err-line >&2; uname -s"))
    done = wait_pod(cluster, namespace, "hello", terminated, "hello to finish")
    assert done.status.phase == "Succeeded"
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (0, "Completed")
    log = cluster.core.read_namespaced_pod_log("hello", namespace)
    assert sorted(log.splitlines()) == sorted(["out-line", "err-line", os.uname().sysname])
    # The pod records which image its process stood in for, in an annotation and an event.
    assert done.metadata.annotations[ANNOTATION + "stands-in-for-image"] == f"main={IMAGE}"
    events = cluster.core.list_namespaced_event(namespace, field_selector="involvedObject.name=hello").items
    assert any(e.reason == "Started" and IMAGE in e.message for e in events)


def test_follow_streams_a_running_pods_output_and_ends_with_it(cluster: LocalCluster, namespace: str):
    script = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done"
    cluster.core.create_namespaced_pod(namespace, pod("ticker", script))
    wait_pod(cluster, namespace, "ticker", lambda p: p.status.phase == "Running", "ticker to run")
    # A read timeout, not a hang, if the stream does not end with the container.
    response = cluster.core.read_namespaced_pod_log("ticker", namespace, follow=True, _preload_content=False,
                                                    _request_timeout=(10, 30))
    seen: list[tuple[float, str]] = []
    try:
        for raw in response.stream(64):
            for line in raw.decode().splitlines():
                seen.append((time.monotonic(), line))
    finally:
        response.release_conn()
    ended = time.monotonic()
    assert [line for _, line in seen] == [f"tick {i}" for i in range(1, 7)]
    # Streamed as written: the first and the last tick arrived seconds apart ...
    assert seen[-1][0] - seen[0][0] > 2, seen
    # ... and the stream ended with the container (kwok patched: hack/README.md), not at the 30 s
    # read timeout (which raises). The container exits 1 s after its last tick; 8 s was tight for
    # the agent, kwok and the API server on a loaded host, 20 s stays below the read timeout.
    assert ended - seen[-1][0] < 20


def test_exit_code_fails_the_pod_with_that_code(cluster: LocalCluster, namespace: str):
    cluster.core.create_namespaced_pod(namespace, pod("exit7", "echo about to fail; exit 7"))
    done = wait_pod(cluster, namespace, "exit7", terminated, "exit7 to finish")
    assert done.status.phase == "Failed"
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (7, "Error")
    assert cluster.core.read_namespaced_pod_log("exit7", namespace).splitlines() == ["about to fail"]


def test_on_failure_restarts_with_restart_count_last_state_and_previous_log(cluster: LocalCluster, namespace: str):
    # The pod's TMPDIR survives its container's restarts (a scratch folder per pod): run 3 succeeds.
    script = ("n=$(ls $TMPDIR/runs 2>/dev/null | wc -l); mkdir -p $TMPDIR/runs; touch $TMPDIR/runs/$n; "
              "echo run $n; [ $n -ge 2 ]")
    cluster.core.create_namespaced_pod(namespace, pod("flaky", script, restart_policy="OnFailure"))
    done = wait_pod(cluster, namespace, "flaky", terminated, "flaky to succeed", timeout_s=90)
    assert done.status.phase == "Succeeded"
    status = done.status.container_statuses[0]
    assert status.restart_count == 2
    assert status.last_state.terminated.exit_code == 1
    assert status.state.terminated.exit_code == 0
    assert cluster.core.read_namespaced_pod_log("flaky", namespace).splitlines() == ["run 2"]
    assert cluster.core.read_namespaced_pod_log("flaky", namespace, previous=True).splitlines() == ["run 1"]


def test_deleting_a_running_pod_ends_its_process_and_children(cluster: LocalCluster, namespace: str):
    # The shell ignores SIGTERM: the agent must SIGKILL the group after the grace period.
    script = "trap '' TERM; sleep 600 & echo child $!; echo shell $$$$; wait"
    cluster.core.create_namespaced_pod(namespace, pod("victim", script, grace_s=2))
    wait_pod(cluster, namespace, "victim", lambda p: p.status.phase == "Running", "victim to run")

    def log_with_pids() -> str:
        text = cluster.core.read_namespaced_pod_log("victim", namespace)
        return text if "shell" in text else ""

    log = wait_for(log_with_pids, 30, "victim's pids")
    pids = [int(n) for n in re.findall(r"(?:child|shell) (\d+)", log)]
    assert len(pids) == 2 and all(pid_alive(pid) for pid in pids), log
    started = time.monotonic()
    cluster.core.delete_namespaced_pod("victim", namespace)

    def pod_gone() -> bool:
        return "victim" not in [p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items]

    wait_for(pod_gone, 30, "victim to be removed")
    assert not any(pid_alive(pid) for pid in pids), f"still running: {[p for p in pids if pid_alive(p)]}"
    assert time.monotonic() - started >= 1.5  # the grace period was given


def test_env_field_refs_and_var_expansion(cluster: LocalCluster, namespace: str):
    env = [
        client.V1EnvVar(name="GREETING", value="hi"),
        client.V1EnvVar(name="MESSAGE", value="$(GREETING) from $(POD_NAME) $(UNDEFINED) $$(ESCAPED)"),
        client.V1EnvVar(name="POD_NAME", value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path="metadata.name"))),
        client.V1EnvVar(name="POD_NAMESPACE", value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path="metadata.namespace"))),
        client.V1EnvVar(name="NODE", value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path="spec.nodeName"))),
        client.V1EnvVar(name="INDEX", value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path="metadata.annotations['example.com/index']"))),
    ]
    script = ("echo msg=$MESSAGE; echo ns=$POD_NAMESPACE node=$NODE index=$INDEX; "
              "echo arg=$(GREETING)-$(POD_NAME); echo path=$(command -v python)")
    created = pod("envs", script, env=env, annotations={"example.com/index": "3"})
    cluster.core.create_namespaced_pod(namespace, created)
    done = wait_pod(cluster, namespace, "envs", terminated, "envs to finish")
    lines = cluster.core.read_namespaced_pod_log("envs", namespace).splitlines()
    # POD_NAME is declared after MESSAGE: the kubelet leaves $(POD_NAME) as it is there.
    assert lines[0] == "msg=hi from $(POD_NAME) $(UNDEFINED) $(ESCAPED)"
    assert lines[1] == f"ns={namespace} node={done.spec.node_name} index=3"
    assert lines[2] == "arg=hi-envs"
    # The project's venv comes first on PATH: `python` is the workloads' environment.
    venv = Path(__file__).resolve().parents[3] / ".venv" / "bin"
    assert lines[3] == f"path={venv / 'python'}"


ALL_REDUCE = ("import os, socket, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
              "t = torch.ones(1) * (dist.get_rank() + 1); dist.all_reduce(t); "
              "print('rank', dist.get_rank(), 'sum', int(t.item()), 'master', os.environ['MASTER_ADDR'], "
              "os.environ['MASTER_PORT'], flush=True); dist.destroy_process_group()")
# (destroy_process_group: gloo torn down at interpreter exit may abort, "terminate called without an
# active exception", failing a rank that had done its work.)


def torchrun_job(name: str) -> tuple[client.V1Service, client.V1Job]:
    """The torchrun launcher's shape (manifests/torchrun-job.yaml): headless Service + Indexed Job."""
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(cluster_ip="None", publish_not_ready_addresses=True,
                                  selector={"batch.kubernetes.io/job-name": name},
                                  ports=[client.V1ServicePort(name="rendezvous", port=29500)]))
    args = ["--nnodes=2", "--nproc-per-node=1", "--node-rank=$(JOB_COMPLETION_INDEX)",
            "--master-addr=$(MASTER_ADDR)", "--master-port=29500", "--no-python", "python", "-c", ALL_REDUCE]
    env = [client.V1EnvVar(name="MASTER_ADDR", value=f"{name}-0.{name}"),
           client.V1EnvVar(name="MASTER_PORT", value="29500")]
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(completion_mode="Indexed", completions=2, parallelism=2, backoff_limit=0,
                              template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
                                  subdomain=name, restart_policy="Never", containers=[client.V1Container(
                                      name="worker", image=IMAGE, command=["torchrun"], args=args, env=env)]))))
    return service, job


def test_torchrun_job_resolves_its_service_to_loopback_with_its_own_port(cluster: LocalCluster, namespace: str):
    for name in ("ar-a", "ar-b"):  # two jobs at once: each gets its own rendezvous port
        service, job = torchrun_job(name)
        cluster.core.create_namespaced_service(namespace, service)
        cluster.batch.create_namespaced_job(namespace, job)

    def finished(name: str) -> client.V1Job | None:
        job = cluster.batch.read_namespaced_job(name, namespace)
        return job if (job.status.succeeded or 0) + (job.status.failed or 0) >= 1 and not job.status.active else None

    ports = {}
    for name in ("ar-a", "ar-b"):
        job = wait_for(lambda name=name: finished(name), 120, f"job {name} to finish")
        assert job.status.succeeded == 2, f"{name}: {job.status}"
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={name}")
        # (torchrun's agents may log after the workers, e.g. the store closing under rank 1's agent)
        lines = sorted(line for p in pods.items
                       for line in cluster.core.read_namespaced_pod_log(p.metadata.name, namespace).splitlines()
                       if line.startswith("rank "))
        port = lines[0].split()[-1]
        assert lines == [f"rank 0 sum 3 master 127.0.0.1 {port}", f"rank 1 sum 3 master 127.0.0.1 {port}"]
        assert port != "29500"
        ports[name] = port
    assert ports["ar-a"] != ports["ar-b"]


def test_a_pod_printing_100_mb_keeps_its_last_line(cluster: LocalCluster, namespace: str):
    # 100 MiB in 1 MiB-long lines (split into 16 KiB CRI records) then a last short line.
    script = ("python -c \"import sys; line = 'x' * (1 << 20) + '\\n'; "
              "[sys.stdout.write(line) for _ in range(100)]; print('the last line', flush=True)\"")
    cluster.core.create_namespaced_pod(namespace, pod("big", script))
    done = wait_pod(cluster, namespace, "big", terminated, "big to finish", timeout_s=120)
    assert done.status.phase == "Succeeded"
    tail = cluster.core.read_namespaced_pod_log("big", namespace, tail_lines=2).splitlines()
    assert tail[-1] == "the last line"
    # tail_lines counts CRI records, and the 1 MiB line's last record may hold only its newline:
    # what precedes the last line is x's or nothing. (Compared as a set: a failure must not print
    # megabytes.)
    assert set("".join(tail[:-1])) <= {"x"}
    log_file = next(Path(p) for p in _log_files(done))
    assert log_file.stat().st_size > 100 * (1 << 20)


def _log_files(done: client.V1Pod) -> list[str]:
    """The container log files the node agent wrote for the pod, in the state folder the cluster of this
    environment uses (KT2T_STATE, else under XDG_STATE_HOME, as hack/local-cluster resolves it)."""
    state = Settings.from_env(dict(os.environ)).state_dir
    return [str(p) for p in (state / "pod-logs").glob(f"*_{done.metadata.name}_{done.metadata.uid}/main/0.log")]
