"""The cluster's lifecycle: up (idempotent), down, status, and waiting for it to be usable.

May import: localcluster.base, localcluster.control, localcluster.emulation, localcluster.realnodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.base.settings import Settings
from localcluster.control.api import ApiClient, ApiError
from localcluster.control.components import (
    MPI_OPERATOR_LOCK_NAMESPACE,
    Component,
    components,
    is_healthy,
    kubeconfig_path,
    process_env,
)
from localcluster.control.kubeconfig import write_kubeconfig
from localcluster.control.pki import CLIENT_IDENTITIES, Pki
from localcluster.control.processes import ProcessRecord, code_fingerprint
from localcluster.control.training_controllers import TRAINING_CONTROLLERS
from localcluster.control.waits import ClusterError, progress, wait_until
from localcluster.emulation import node_cpus, nodes
from localcluster.realnodes.manager import RealNodeError, RealNodes

# Written into the state folder by `up`; `down` deletes only a folder that carries it.
STATE_MARKER = ".kubetest2-training-local-cluster"

# CRDs installed before the components that need them start. hack/build-binaries.sh copies them
# out of the pinned Go modules into <bin dir>/crds/, so `up` needs no `go` and no module cache.
CRD_FILES = ("kwok.x-k8s.io_logs.yaml", "kubeflow.org_mpijobs.yaml", "trainer.kubeflow.org_trainjobs.yaml",
             "trainer.kubeflow.org_trainingruntimes.yaml", "trainer.kubeflow.org_clustertrainingruntimes.yaml",
             "jobset.x-k8s.io_jobsets.yaml", "elastic.iml.github.io_elasticjobs.yaml",
             "elastic.iml.github.io_scaleplans.yaml")

# On each CRD `up` applied: sha256 of the file it came from.
CRD_SOURCE_ANNOTATION = "kubetest2-training.local/crd-file-sha256"

# Waiting for many nodes: at least this long per node (1,000 nodes took about 4 minutes), and
# at most this many of those not ready named in a timeout's message.
NODE_WAIT_S_PER_NODE = 0.5
NODES_SHOWN = 10


@dataclass
class LocalCluster:
    """The local control plane described by one Settings."""

    settings: Settings

    @property
    def pki(self) -> Pki:
        return Pki(self.settings.pki_dir)

    def api(self) -> ApiClient:
        """A client of this cluster's API server; ClusterError when the cluster was never started."""
        pki = self.pki
        if not pki.ca_cert.exists():
            raise ClusterError(f"the local cluster is not up (no {pki.ca_cert}): run `hack/local-cluster up` first, "
                               f"with the same KT2T_STATE ({self.settings.state_dir})")
        return ApiClient(self.settings.apiserver_url, pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin"))

    def real_nodes(self) -> RealNodes:
        return RealNodes(self.settings, self.pki)

    def components(self) -> list[Component]:
        real = self.real_nodes()
        return components(self.settings, self.pki, real.layout.egress_config if real.wanted() else None)

    def record(self, component: Component) -> ProcessRecord:
        return ProcessRecord(self.settings.run_dir, component.name)

    def log_file(self, component: Component) -> Path:
        return self.settings.logs_dir / f"{component.name}.log"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One `up`/`down`/`nodes` at a time per state folder (parallel test sessions share it)."""
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.settings.state_dir.parent / f".{self.settings.state_dir.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # ---- up -------------------------------------------------------------------------------------

    def up(self) -> Path:
        """Builds or reuses the binaries, starts what is not running, waits until usable."""
        started_at = time.monotonic()
        real = self.real_nodes()
        try:
            real.check(binaries=False)  # before anything is made: root, packages
        except RealNodeError as error:
            raise ClusterError(str(error)) from None
        with self.locked():
            self.build_binaries(real_nodes=real.wanted() > 0)
            (self.settings.state_dir / STATE_MARKER).touch()
            self.pki.generate()
            try:
                real.check(binaries=True)
                real.prepare()
            except RealNodeError as error:
                raise ClusterError(str(error)) from None
            for identity in CLIENT_IDENTITIES:
                write_kubeconfig(kubeconfig_path(self.settings, identity.name), self.settings.apiserver_url,
                                 self.pki, identity.name)
            write_kubeconfig(self.settings.kubeconfig, self.settings.apiserver_url, self.pki, "admin")
            for controller in TRAINING_CONTROLLERS:
                controller.write_files(self.settings, self.pki)
            for component in self.components():
                self.ensure_running(component)
                if component.name == "kube-apiserver":
                    self.bootstrap_api()
            api = self.api()
            if not nodes.managed_nodes(api):
                created = nodes.replace_nodes(api, self.settings.node_shape, self.settings.node_count,
                                              self.settings.node_efa)
                progress(f"created {self.settings.node_shape} nodes {', '.join(created)}")
            try:
                real.ensure(api)
            except RealNodeError as error:
                raise ClusterError(str(error)) from None
            self.wait_usable()
        progress(f"cluster up in {time.monotonic() - started_at:.1f}s; kubeconfig {self.settings.kubeconfig}")
        return self.settings.kubeconfig

    def build_binaries(self, real_nodes: bool = False) -> None:
        progress("binaries: hack/build-binaries.sh (reuses its cache)")
        argv = [str(self.settings.build_script), *(["--real-nodes"] if real_nodes else [])]
        result = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"hack/build-binaries.sh failed with exit code {result.returncode} (see above)")
        printed = Path(result.stdout.strip().splitlines()[-1])
        if printed.resolve() != self.settings.bin_dir.resolve():
            raise ClusterError(f"hack/build-binaries.sh put the binaries in {printed}, expected "
                               f"{self.settings.bin_dir} (KT2T_CACHE differs?)")

    def ensure_running(self, component: Component) -> None:
        record = self.record(component)
        pid = record.running_pid()
        fingerprint = code_fingerprint(component.argv, component.code_files)
        if pid is not None and record.recorded_fingerprint() != fingerprint:
            progress(f"{component.name}: pid {pid} runs older code or binaries; restarting it")
            record.stop()
            pid = None
        if pid is not None and is_healthy(component, self.pki):
            progress(f"{component.name}: running (pid {pid})")
            return
        if pid is not None:
            # Ours but unhealthy: give it the chance to come up (e.g. right after a restart).
            with contextlib.suppress(ClusterError):
                self.wait_healthy(component, record, timeout_s=10)
                progress(f"{component.name}: running (pid {pid})")
                return
            progress(f"{component.name}: pid {pid} is unhealthy; restarting it")
            record.stop()
        if component.name == "kwok":
            self.release_node_leases()
        log_file = self.log_file(component)
        pid = record.start(component.argv, log_file, env=process_env(component), cwd=self.settings.state_dir,
                           fingerprint=fingerprint)
        progress(f"{component.name}: started (pid {pid}, log {log_file})")
        self.wait_healthy(component, record, self.settings.wait_timeout_s)

    def release_node_leases(self) -> None:
        """Deletes the node Leases a previous kwok held: kwok manages a node only while it holds
        the node's Lease, and a new kwok process (new identity) gives up on a Lease that exists."""
        api = self.api()
        for node in nodes.managed_nodes(api):
            api.delete("Lease", node["metadata"]["name"], "kube-node-lease")

    def wait_healthy(self, component: Component, record: ProcessRecord, timeout_s: float) -> None:
        def healthy_or_dead() -> bool:
            if record.running_pid() is None:
                raise ClusterError(f"{component.name} exited; last lines of {self.log_file(component)}:\n"
                                   + tail(self.log_file(component)))
            return is_healthy(component, self.pki)

        wait_until(healthy_or_dead, timeout_s, f"{component.name} to be healthy ({component.health_url or 'alive'})",
                   lambda: tail(self.log_file(component), 5))

    def bootstrap_api(self) -> None:
        """What the components after the API server need from it: CRDs, mpi-operator's lock namespace,
        the training controllers' webhook configurations."""
        api = self.api()
        for file_name in CRD_FILES:
            crd_file = self.settings.bin_dir / "crds" / file_name
            if not crd_file.is_file():
                raise ClusterError(f"install CRD: {crd_file} is missing; run hack/build-binaries.sh")
            text = crd_file.read_text()
            digest = hashlib.sha256(text.encode()).hexdigest()
            # Parsing and applying the large CRDs (Trainer's, JobSet's, mpi-operator's: ~1 MB each)
            # took most of an idempotent `up` (about 80 s at load 12): skip a CRD already applied
            # from this very file.
            live = api.get_or_none("CustomResourceDefinition", crd_name(file_name))
            if ((live or {}).get("metadata", {}).get("annotations") or {}).get(CRD_SOURCE_ANNOTATION) == digest:
                continue
            for document in yaml.safe_load_all(text):
                if document:
                    document["metadata"].setdefault("annotations", {})[CRD_SOURCE_ANNOTATION] = digest
                    api.apply(document)
            progress(f"CRD {crd_name(file_name)}: applied from {crd_file}")
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MPI_OPERATOR_LOCK_NAMESPACE}})
        # Trainer's and JobSet's webhooks, served on 127.0.0.1 once their controllers start.
        for controller in TRAINING_CONTROLLERS:
            for configuration in controller.webhook_configurations(self.settings, self.pki):
                api.apply(configuration)
        for file_name in CRD_FILES:
            name = crd_name(file_name)
            wait_until(lambda name=name: crd_established(api, name), self.settings.wait_timeout_s,
                       f"CRD {name} to be established")

    def wait_usable(self) -> None:
        """Nodes Ready and the `default` ServiceAccount present: pods can be created and run."""
        api = self.api()

        def nodes_ready() -> bool:
            managed = nodes.managed_nodes(api)
            return bool(managed) and all(nodes.node_accepts_pods(n) for n in managed)

        def node_states() -> str:
            managed = nodes.managed_nodes(api)
            refusing = [n for n in managed if not nodes.node_accepts_pods(n)]
            shown = ", ".join(f"{n['metadata']['name']} ready={nodes.node_is_ready(n)}" for n in refusing[:NODES_SHOWN])
            more = f" and {len(refusing) - NODES_SHOWN} more" if len(refusing) > NODES_SHOWN else ""
            return f"{len(refusing)} of {len(managed)} nodes not Ready or still tainted: {shown}{more}"

        # The node lifecycle controller untaints new nodes a few a second: a thousand take minutes.
        timeout_s = max(self.settings.wait_timeout_s, NODE_WAIT_S_PER_NODE * self.settings.node_count)
        wait_until(nodes_ready, timeout_s, "the nodes to be Ready and untainted", node_states)
        wait_until(lambda: api.get_or_none("ServiceAccount", "default", "default") is not None,
                   self.settings.wait_timeout_s, "ServiceAccount default/default (kube-controller-manager)")

    # ---- down -----------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stops the processes `up` started (recorded pid, matching command line), removes the state."""
        stopped = []
        with self.locked():
            removed = self.real_nodes().teardown()
            if removed:
                progress(f"real nodes: removed {', '.join(removed)}")
            for component in reversed(self.components()):
                record = self.record(component)
                if record.stop():
                    stopped.append(component.name)
                    progress(f"{component.name}: stopped")
            node_cpus.remove_leftovers(self.settings.state_dir)
            state = self.settings.state_dir
            if state.exists():
                if not (state / STATE_MARKER).exists() and any(state.iterdir()):
                    raise ClusterError(f"not removing {state}: it lacks {STATE_MARKER}, so `up` did not make it")
                shutil.rmtree(state)
        return stopped

    # ---- one component ---------------------------------------------------------------------------

    def component(self, name: str) -> Component:
        for component in self.components():
            if component.name == name:
                return component
        names = ", ".join(c.name for c in self.components())
        raise ClusterError(f"no component {name!r}; the components are {names}")

    def stop(self, name: str) -> bool:
        """Stops one component (tests of outages); `up` or `restart` starts it again. A real node's
        process (`real-cpu-0-kubelet`, ...) is killed at once, as when it crashes."""
        with self.locked():
            real = self.real_nodes()
            if name in real.process_names():
                return real.stop_process(name)
            return self.record(self.component(name)).stop()

    def restart(self, name: str) -> None:
        """Stops one component and starts it again with the same state; waits until healthy."""
        with self.locked():
            real = self.real_nodes()
            if name in real.process_names():
                real.stop_process(name)
                real.ensure(self.api())
                return
            component = self.component(name)
            self.record(component).stop()
            self.ensure_running(component)

    # ---- status ---------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One row per component: name, pid (None when not running), port, healthy."""
        rows = []
        for component in self.components():
            pid = self.record(component).running_pid()
            rows.append({
                "name": component.name,
                "pid": pid,
                "port": component.port,
                "healthy": pid is not None and is_healthy(component, self.pki),
            })
        return rows + self.real_nodes().status_rows()


def crd_name(file_name: str) -> str:
    """The CRD a file of CRD_FILES defines: <group>_<plural>.yaml -> <plural>.<group>."""
    group, plural = Path(file_name).stem.split("_", 1)
    return f"{plural}.{group}"


def crd_established(api: ApiClient, name: str) -> bool:
    crd = api.get_or_none("CustomResourceDefinition", name)
    conditions = (crd or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


__all__ = ["ApiError", "ClusterError", "LocalCluster", "progress", "wait_until"]
