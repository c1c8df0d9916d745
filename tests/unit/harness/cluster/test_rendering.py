"""Launchers render a workload on a placement without a cluster: torchrun, mpi and per-node."""

from __future__ import annotations

from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.manifests import render
from harness.jobs.launchers import LAUNCHERS, rank_locations
from harness.jobs.workload import Placement, Workload

LABELS = {MANAGED_BY_LABEL: MANAGED_BY, "kubetest2-training/job": "bert-training"}


def placement(accelerator="nvidia", nodes=("n0", "n1"), per_node=8, efa=4) -> Placement:
    return Placement(namespace="ns", labels=LABELS, pod_annotations={"a": "b"}, pod_env={"NCCL_DEBUG": "WARN"},
                     node_type="p4d.24xlarge", node_names=nodes, processes_per_node=per_node, efa_per_node=efa,
                     accelerator=accelerator, image="repo/train:1", job_timeout=1200.0)


def objects(launcher: str, workload: Workload, where: Placement) -> list[dict]:
    return [obj for r in LAUNCHERS[launcher].renderings(workload, where) for obj in render(r.template, r.fields)]


def container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c["env"]}


def test_torchrun_on_gpus_asks_for_gpus_and_efa_and_launches_every_process():
    bert = Workload("bert-training", "workloads.bert", ("--size", "base"))
    service, job = objects("torchrun", bert, placement())
    assert service["kind"] == "Service" and job["spec"]["completions"] == 2
    worker = container(job)
    assert worker["args"][:2] == ["--nnodes=2", "--nproc-per-node=8"]
    assert worker["args"][-4:] == ["-m", "workloads.bert", "--size", "base"]
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}
    env = env_of(worker)
    assert env["MASTER_ADDR"] == "bert-training-0.bert-training" and env["NUM_GPUS_PER_NODE"] == "8"
    assert env["NCCL_DEBUG"] == "WARN"  # the caller's NCCL_* reach the pods
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert job["spec"]["activeDeadlineSeconds"] == 1260


def test_torchrun_on_cpu_asks_for_cpus_and_elastic_tolerates_a_lost_worker():
    elastic = Workload("nanogpt-elastic", "workloads.nanogpt", elastic=True, max_restarts=3)
    _, job = objects("torchrun", elastic, placement("cpu", per_node=1, efa=0))
    worker = container(job)
    assert worker["resources"] == {"requests": {"cpu": "1"}}
    assert "--rdzv-backend=c10d" in worker["args"] and "--max-restarts=3" in worker["args"]
    assert job["spec"]["backoffLimit"] == 4
    assert env_of(worker)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # Worker 0 is told it hosts the c10d store: torchrun's own guess needs the cluster DNS to know
    # worker 0 already (tests/unit/harness/jobs/test_torchrun_entry.py runs the command).
    assert worker["command"][:2] == ["sh", "-c"] and "is_host" in worker["command"][2]
    assert worker["command"][3] == "torchrun"


def test_static_torchrun_runs_torchrun_itself():
    bert = Workload("bert-training", "workloads.bert", ("--size", "tiny"))
    _, job = objects("torchrun", bert, placement("cpu", per_node=1, efa=0))
    assert container(job)["command"] == ["torchrun"]


def test_mpi_runs_one_slot_per_process_on_every_worker():
    nccl = Workload("nccl-tests-2n", binary="/opt/nccl-tests/build/all_reduce_perf", args=("-b", "8"),
                    image="repo/nccl:1", launcher="mpi", extra_env={"NCCL_BUFFSIZE": "8388608"})
    (mpijob,) = objects("mpi", nccl, placement())
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    command = launcher["command"]
    assert command[:9] == ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "16", "-bind-to", "none",
                           "-map-by", "slot"]
    assert command[-3:] == ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8"]
    assert launcher["image"] == "repo/nccl:1"
    assert mpijob["spec"]["slotsPerWorker"] == 8
    # mpi-operator's headless Service is named after the job.
    assert env_of(launcher)["MASTER_ADDR"] == "nccl-tests-2n-worker-0.nccl-tests-2n"


def test_mpi_forwards_every_variable_of_the_launcher_with_x():
    bert = Workload("bert-training", "workloads.bert", ("--size", "tiny"), extra_env={"EXTRA": "1"})
    (mpijob,) = objects("mpi", bert, placement("cpu", per_node=2, efa=0))
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    command = launcher["command"]
    forwarded = [command[i + 1] for i, arg in enumerate(command) if arg == "-x"]
    image = ["PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "LD_PRELOAD", "HF_HUB_OFFLINE"]
    assert forwarded == [*image, "NCCL_DEBUG", "NUM_GPUS_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATOR",
                         "OMP_NUM_THREADS", "EXTRA"]
    assert set(forwarded) - set(image) == set(env_of(launcher)) - set(image)  # nothing set is left behind
    assert command[command.index("-np") + 1] == "4"
    assert command[-5:] == ["python", "-m", "workloads.bert", "--size", "tiny"]
    assert "NODE_NAME" not in env_of(launcher)  # it would be the launcher's node, not a rank's


def test_mpijob_has_upstreams_shape_with_its_fixes():
    (mpijob,) = objects("mpi", Workload("bert-training", "workloads.bert"), placement("cpu", per_node=1, efa=0))
    spec = mpijob["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["backoffLimit"] == 1
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    # The restart policy at replica level, where mpi-operator reads it, not in the pod template.
    assert launcher["restartPolicy"] == "Never" and "restartPolicy" not in launcher["template"]["spec"]
    pod = worker["template"]["spec"]
    assert pod["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {"training.kubeflow.org/job-name": "bert-training",
                                                     "training.kubeflow.org/job-role": "worker"}


def test_per_node_pins_one_job_to_each_node():
    listing = Workload("gpu-capacity", binary="nvidia-smi", args=("-L",), image="repo/nccl:1", launcher="per-node")
    jobs = objects("per-node", listing, placement(nodes=("ip-10-0-1-5.ec2.internal", "n1")))
    assert [j["metadata"]["name"] for j in jobs] == ["gpu-capacity-ip-10-0-1-5.ec2.internal", "gpu-capacity-n1"]
    assert [j["spec"]["template"]["spec"]["nodeName"] for j in jobs] == ["ip-10-0-1-5.ec2.internal", "n1"]
    assert container(jobs[0])["command"] == ["nvidia-smi", "-L"]
    launcher = LAUNCHERS["per-node"]
    assert launcher.succeeded(listing, placement()).name == "2 pods (kubetest2-training/job=gpu-capacity) to succeed"


def test_ranks_are_located_on_their_pods_and_nodes():
    def pod(name, node, index=None, deleting=False):
        meta = {"name": name, "annotations": {"batch.kubernetes.io/job-completion-index": index} if index else {}}
        if deleting:
            meta["deletionTimestamp"] = "now"
        return {"metadata": meta, "spec": {"nodeName": node}}

    torchrun = [pod("j-0-abc", "n0", "0"), pod("j-1-def", "n1", "1"), pod("j-1-old", "n9", "1", deleting=True)]
    assert rank_locations(torchrun, 2) == {0: ("j-0-abc", "n0"), 1: ("j-0-abc", "n0"), 2: ("j-1-def", "n1"),
                                           3: ("j-1-def", "n1")}
    mpi = [pod("j-launcher", "n0"), pod("j-worker-1", "n1"), pod("j-worker-0", "n0")]
    assert rank_locations(mpi, 1) == {0: ("j-worker-0", "n0"), 1: ("j-worker-1", "n1")}


def test_torchrun_pods_prefer_one_node_each_on_cpu_nodes_too():
    """A straggler is named by node: two ranks on one CPU node would hide which node is slow."""
    _, job = objects("torchrun", Workload("bert-training", "workloads.bert"), placement("cpu", per_node=1))
    pod = job["spec"]["template"]
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_cpu_processes_use_the_one_cpu_they_request():
    _, job = objects("torchrun", Workload("bert-training", "workloads.bert"), placement("cpu", per_node=1))
    assert env_of(container(job))["OMP_NUM_THREADS"] == "1"
    assert container(job)["resources"] == {"requests": {"cpu": "1"}}
    _, job = objects("torchrun", Workload("bert-training", "workloads.bert"), placement())
    assert "OMP_NUM_THREADS" not in env_of(container(job))


def test_mpirun_has_upstreams_nccl_tests_options():
    """upstream's nccl-tests MPIJob: `--mca pml ^cm,ucx`, veth_def_agent kept off OpenMPI's TCP, and
    aws-ofi-nccl's tuner on EFA nodes (unless the caller set NCCL_TUNER_PLUGIN)."""
    from harness.jobs.launchers.mpi import AWS_OFI_NCCL_TUNER

    nccl = Workload("nccl", binary="/opt/nccl-tests/build/all_reduce_perf", image="repo/nccl:1", launcher="mpi")
    (mpijob,) = objects("mpi", nccl, placement(efa=32))
    launcher = container({"spec": mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]})
    command = launcher["command"]
    pairs = {(command[i + 1], command[i + 2]) for i, arg in enumerate(command) if arg == "--mca"}
    assert {("pml", "^cm,ucx"), ("btl_tcp_if_exclude", "lo,docker0,veth_def_agent")} <= pairs
    assert env_of(launcher)["NCCL_TUNER_PLUGIN"] == AWS_OFI_NCCL_TUNER
    assert command[command.index("NCCL_TUNER_PLUGIN") - 1] == "-x"
    (no_efa,) = objects("mpi", nccl, placement(efa=0))
    assert "NCCL_TUNER_PLUGIN" not in env_of(container({"spec": no_efa["spec"]["mpiReplicaSpecs"]["Launcher"]}))
    own = Workload("nccl", binary="x", launcher="mpi", extra_env={"NCCL_TUNER_PLUGIN": "/mine.so"})
    (mpijob,) = objects("mpi", own, placement(efa=32))
    assert env_of(container({"spec": mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]}))["NCCL_TUNER_PLUGIN"] == "/mine.so"


def test_every_launcher_answers_the_whole_launcher_interface():
    """The job's monitor calls these on whichever launcher runs (job.py): a launcher without one
    fails every run of it with an AttributeError, whatever the cluster does."""
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Failed"}}
    for name, launcher in LAUNCHERS.items():
        assert isinstance(launcher.run_counts([pod]), dict), name
        assert launcher.retried(pod) in (True, False), name
        assert isinstance(launcher.made_by_controllers(Workload("w", binary="b"), placement()), list), name
