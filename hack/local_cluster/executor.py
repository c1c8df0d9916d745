"""Runs a pod's containers as local processes: the kubelet's container side for kwok's nodes.

Each container's command and args run in their own process group (its "container": a signal to
the group reaches every child), with the pod's environment (container_env.py), PATH starting
with the project's venv (the workloads image's environment stands in for the image, which is not
pulled), cwd and /tmp in the pod's scratch folder (a container's file system is its own).
stdout and stderr go, line by line as written, to the CRI-format file that kwok serves through
`pods/log`. Exit codes become container states and the pod's phase; the restart policy restarts
containers (restartCount, lastState, the previous run's log kept); deleting the pod stops them
(SIGTERM to the group, SIGKILL after the grace period), as the kubelet does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from .api import ApiClient, ApiError
from .container_env import ContainerConfigError, LoopbackNames, expand, field_value, resource_value

ANNOTATION_PREFIX = "kubetest2-training.local/"
# Set by the agent on every pod it runs for real; kwok's stages leave such pods alone.
EXECUTED_ANNOTATION = ANNOTATION_PREFIX + "executed-by"
EXECUTED_BY = "node-agent"
# container=image pairs: which image each local process stood in for (the image is not pulled).
STANDS_IN_FOR_ANNOTATION = ANNOTATION_PREFIX + "stands-in-for-image"
# CRI log lines are split past this many bytes (tag P), as container runtimes do: bounded memory.
MAX_LINE_BYTES = 16 * 1024
READ_BYTES = 64 * 1024
# Restart back-off: 1 s doubling to 20 s (the kubelet's is 10 s to 5 min; tests need it shorter).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 20.0
STOP_GRACE_DEFAULT_S = 30
POD_CIDR_PREFIX = "10.244"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cri_stamp() -> bytes:
    return (datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z").encode()


def pseudo_pod_ip(uid: str) -> str:
    """A stable address in the pod CIDR (status.podIP; the processes themselves use 127.0.0.1)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return f"{POD_CIDR_PREFIX}.{digest[0]}.{1 + digest[1] % 254}"


class CriLogWriter:
    """One container run's log file: both streams, line by line, `<time> <stream> <F|P> <text>`."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: IO[bytes] = open(path, "ab", buffering=0)  # noqa: SIM115 (closed by close())
        self.lock = threading.Lock()

    def pump(self, stream: IO[bytes], name: str) -> None:
        """Copies a pipe into the log as the process writes it, until the pipe closes."""
        tag = name.encode()
        pending = b""
        fd = stream.fileno()
        while True:
            chunk = os.read(fd, READ_BYTES)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            entries = [(line, b"F") for line in lines]
            while len(pending) >= MAX_LINE_BYTES:
                entries.append((pending[:MAX_LINE_BYTES], b"P"))
                pending = pending[MAX_LINE_BYTES:]
            self.write(tag, entries)
        if pending:
            self.write(tag, [(pending, b"F")])
        stream.close()

    def write(self, stream: bytes, entries: list[tuple[bytes, bytes]]) -> None:
        if not entries:
            return
        stamp = cri_stamp()
        data = b"".join(b"%s %s %s %s\n" % (stamp, stream, flag, line.rstrip(b"\r")) for line, flag in entries)
        with self.lock:
            self.file.write(data)

    def note(self, text: str) -> None:
        """A line of the agent's own (why a container did not start) in the container's log."""
        self.write(b"stderr", [(text.encode(), b"F")])

    def close(self) -> None:
        self.file.close()


@dataclass
class ContainerState:
    """What the pod's status says about one container."""

    name: str
    image: str
    init: bool
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> dict[str, Any] | None:
        return self.state.get("terminated")

    def status(self) -> dict[str, Any]:
        status = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.running,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.pid is not None:
            status["containerID"] = f"kt2t-local://{self.pid}"
        return status


@dataclass
class PodContext:
    """What every container of one pod shares: the API, its folders, its names, its env inputs."""

    api: ApiClient
    pod: dict[str, Any]
    logs_dir: Path
    scratch_dir: Path
    venv_bin: Path
    names: LoopbackNames


class PodRun:
    """A pod executed for real: its containers' processes and its status (see the module docstring)."""

    def __init__(self, ctx: PodContext, on_done: Callable[[PodRun], None]) -> None:
        self.ctx = ctx
        self.pod = ctx.pod
        meta = self.pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.restart_policy = self.pod["spec"].get("restartPolicy", "Always")
        self.on_done = on_done
        self.init_specs = list(self.pod["spec"].get("initContainers") or [])
        self.specs = list(self.pod["spec"]["containers"])
        self.states = {c["name"]: ContainerState(c["name"], c.get("image", ""), True) for c in self.init_specs}
        self.states.update({c["name"]: ContainerState(c["name"], c.get("image", ""), False) for c in self.specs})
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.RLock()
        self.status_lock = threading.Lock()
        self.stopping = threading.Event()
        # Set when the pod was deleted (then removed once stopped); not when the agent itself stops.
        self.deleted = threading.Event()
        self.started_at = now_rfc3339()
        self.initialized = not self.init_specs
        self.phase = "Pending"
        self.finished = threading.Event()

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._run_pod, name=f"pod-{self.name}", daemon=True).start()

    def _run_pod(self) -> None:
        try:
            self._wait_logs_served()
            self.publish()
            for spec in self.init_specs:
                if not self._run_container(spec) or self.stopping.is_set():
                    self._finish()
                    return
            self.initialized = True
            threads = [threading.Thread(target=self._run_container, args=(spec,), daemon=True,
                                        name=f"ctr-{self.name}-{spec['name']}") for spec in self.specs]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            self._finish()

    def _wait_logs_served(self, timeout_s: float = 15) -> None:
        """Start only once kwok serves the pod's log (it learns of the Logs object through its own
        watch): a pod that ends at once would otherwise answer `no logs found`, as a kubelet would
        never do for a container that ran."""
        container = (self.init_specs or self.specs)[0]["name"]
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            try:
                self.ctx.api.request("GET", path, query={"container": container, "limitBytes": "1"}, timeout_s=5)
                return
            except (ApiError, OSError, ValueError):
                time.sleep(0.1)
        agent_log(f"pod {self.namespace}/{self.name}: kwok did not serve its log within {timeout_s:.0f}s; "
                  "starting anyway")

    def _finish(self) -> None:
        if self.finished.is_set():
            return
        self.finished.set()
        self.publish()
        self.on_done(self)

    def _run_container(self, spec: dict[str, Any]) -> bool:
        """Runs one container until it is done for good; True when its last run exited 0."""
        state = self.states[spec["name"]]
        while True:
            exit_code = self._run_once(spec, state)
            restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and exit_code != 0)
            if state.init and self.restart_policy == "Always":
                restart = exit_code != 0  # an init container runs to completion once
            if not restart or self.stopping.is_set():
                self.publish()  # terminated for good (the state was set without publishing: a
                return exit_code == 0  # restart must not show the pod Failed for a moment)
            backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** state.restart_count)
            with self.lock:
                state.last_state = state.state
                state.restart_count += 1
                state.state = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                           f"back-off {backoff:.0f}s restarting failed container={spec['name']} "
                                           f"pod={self.name}_{self.namespace}({self.uid})"}}
                state.pid = None
            self.publish()
            if exit_code != 0:
                self.event("Warning", "BackOff", spec["name"], "Back-off restarting failed container "
                           f"{spec['name']} in pod {self.name}")
            if self.stopping.wait(backoff):
                return False
            self._rotate_log(spec["name"])

    def _run_once(self, spec: dict[str, Any], state: ContainerState) -> int:
        name = spec["name"]
        log = CriLogWriter(self.log_path(name))
        started = now_rfc3339()
        try:
            argv, env, cwd = self.command(spec)
        except (ContainerConfigError, ApiError) as error:
            return self._not_started(state, log, started, "CreateContainerConfigError", str(error))
        resolved = shutil.which(argv[0], path=env.get("PATH")) if "/" not in argv[0] else argv[0]
        if not resolved or not os.access(resolved, os.X_OK):
            message = (f"failed to create containerd task: exec: {argv[0]!r}: executable file not found in $PATH "
                       f"(local execution: the image {spec.get('image')} is not pulled; PATH={env.get('PATH')})")
            return self._not_started(state, log, started, "StartError", message)
        with self.lock:
            if self.stopping.is_set():
                log.close()
                return 137
            process = subprocess.Popen([resolved, *argv[1:]], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            self.processes[name] = process
            state.pid = process.pid
            state.state = {"running": {"startedAt": started}}
        readers = [threading.Thread(target=log.pump, args=(pipe, stream), daemon=True)
                   for pipe, stream in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
        for reader in readers:
            reader.start()
        self.publish()
        self.event("Normal", "Started", name,
                   f"Started container {name} as local process {process.pid} ({' '.join(argv)[:300]}); "
                   f"stands in for image {spec.get('image')} (not pulled)")
        code = process.wait()
        # The container ends with its main process: the rest of its process group goes too (a
        # runtime kills the container's pid namespace), so no orphan outlives the pod.
        kill_group(process.pid, signal.SIGKILL)
        for reader in readers:
            reader.join(timeout=10)
        log.close()
        mark_exited(self.log_path(name))
        exit_code = 128 - code if code < 0 else code
        reason = "Completed" if exit_code == 0 else "Error"
        with self.lock:
            self.processes.pop(name, None)
            state.state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                          "finishedAt": now_rfc3339(), "containerID": f"kt2t-local://{process.pid}"}}
        return exit_code

    def _not_started(self, state: ContainerState, log: CriLogWriter, started: str, reason: str, message: str) -> int:
        log.note(f"node agent: {reason}: {message}")
        log.close()
        mark_exited(self.log_path(state.name))
        with self.lock:
            state.pid = None
            state.state = {"terminated": {"exitCode": 128, "reason": reason, "message": message,
                                          "startedAt": started, "finishedAt": now_rfc3339()}}
        self.event("Warning", "Failed", state.name, f"Error: {message}")
        return 128

    def stop(self, grace_s: float) -> None:
        """Pod deleted: SIGTERM every container's process group, SIGKILL what is left after grace_s."""
        self.stopping.set()
        with self.lock:
            pids = [p.pid for p in self.processes.values()]
        for pid in pids:
            kill_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(group_alive(pid) for pid in pids):
            time.sleep(0.1)
        for pid in pids:
            kill_group(pid, signal.SIGKILL)
        self.finished.wait(timeout=15)

    def kill_now(self) -> None:
        """Pod gone from the API (forced deletion): no grace left."""
        self.stopping.set()
        with self.lock:
            pids = [p.pid for p in self.processes.values()]
        for pid in pids:
            kill_group(pid, signal.SIGKILL)

    # ---- the container's view -------------------------------------------------------------------

    def command(self, spec: dict[str, Any]) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working folder of one container (see container_env.py)."""
        ctx = self.ctx
        tmp = ctx.scratch_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        # `$(VAR)` refers to the variables the pod declares (earlier in its list), as the kubelet's.
        declared: dict[str, str] = {}
        for source in spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for key, value in self._env_source(source).items():
                declared[prefix + key] = value
        for var in spec.get("env") or []:
            if "valueFrom" in var:
                value = self._value_from(spec, var["valueFrom"])
                if value is None:
                    continue
            else:
                value = expand(var.get("value", ""), declared.get)
            declared[var["name"]] = value
        raw_argv = [*(spec.get("command") or []), *(spec.get("args") or [])]
        argv = [expand(arg, declared.get) for arg in raw_argv]
        # What the image would set (PATH: the venv stands in for the image), then the pod's own.
        env: dict[str, str] = {
            "PATH": f"{ctx.venv_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOSTNAME": ctx.names.hostname,
            "TMPDIR": str(tmp),
        }
        env.update({k: self.private_tmp(ctx.names.env_value(k, v), tmp) for k, v in declared.items()})
        argv = [self.private_tmp(arg, tmp) for arg in ctx.names.argv(argv)]
        working_dir = spec.get("workingDir")
        cwd = working_dir if working_dir and Path(working_dir).is_dir() else str(ctx.scratch_dir)
        return argv, env, cwd

    @staticmethod
    def private_tmp(value: str, tmp: Path) -> str:
        """A container's /tmp is its own: /tmp paths (also after `--flag=`) point into the pod's."""
        if value == "/tmp" or value.startswith("/tmp/"):
            return str(tmp) + value[4:]
        flag, eq, rest = value.partition("=")
        if eq and flag.startswith("-") and (rest == "/tmp" or rest.startswith("/tmp/")):
            return f"{flag}={tmp}{rest[4:]}"
        return value

    def _value_from(self, spec: dict[str, Any], source: dict[str, Any]) -> str | None:
        if "fieldRef" in source:
            return field_value(self.pod, source["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in source:
            return resource_value(spec, source["resourceFieldRef"])
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            if key in source:
                ref = source[key]
                data = self._object_data(kind, ref["name"], bool(ref.get("optional")))
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} "
                                               f"{self.namespace}/{ref['name']}")
                return data[ref["key"]]
        raise ContainerConfigError(f"unsupported valueFrom {sorted(source)}")

    def _env_source(self, source: dict[str, Any]) -> dict[str, str]:
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key in source:
                return self._object_data(kind, source[key]["name"], bool(source[key].get("optional")))
        return {}

    def _object_data(self, kind: str, name: str, optional: bool) -> dict[str, str]:
        obj = self.ctx.api.get_or_none(kind, name, self.namespace)
        if obj is None:
            if optional:
                return {}
            raise ContainerConfigError(f"{kind.lower()} {name!r} not found")
        data = dict(obj.get("data") or {})
        if kind == "Secret":
            data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return data

    # ---- files ----------------------------------------------------------------------------------

    def log_path(self, container: str) -> Path:
        return self.ctx.logs_dir / container / "0.log"

    def _rotate_log(self, container: str) -> None:
        """The finished run's log becomes `previous.log` (`kubectl logs --previous`)."""
        current = self.log_path(container)
        with contextlib.suppress(OSError):
            os.replace(current, current.with_name("previous.log"))
        with contextlib.suppress(OSError):
            os.replace(exited_marker(current), exited_marker(current.with_name("previous.log")))

    # ---- status ---------------------------------------------------------------------------------

    def compute_phase(self) -> str:
        states = [self.states[c["name"]] for c in self.specs]
        init_states = [self.states[c["name"]] for c in self.init_specs]
        if any((s.terminated or {}).get("exitCode", 0) != 0 for s in init_states) and \
                (self.restart_policy == "Never" or self.stopping.is_set()):
            return "Failed"
        if not self.initialized:
            return "Pending"
        if self.finished.is_set() or all(s.terminated for s in states):
            if all(s.terminated for s in states):
                return "Succeeded" if all(s.terminated.get("exitCode") == 0 for s in states) else "Failed"  # type: ignore[union-attr]
            return "Failed"
        if any(s.running or s.restart_count or s.terminated for s in states):
            return "Running"
        return "Pending"

    def status(self) -> dict[str, Any]:
        with self.lock:
            phase = self.phase = self.compute_phase()
            ready = phase == "Running" and all(self.states[c["name"]].running for c in self.specs)
            now = now_rfc3339()
            condition = lambda kind, ok, reason="": {  # noqa: E731
                "type": kind, "status": "True" if ok else "False", "lastTransitionTime": now,
                **({"reason": reason} if reason and not ok else {})}
            not_ready_reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
            ip = pseudo_pod_ip(self.uid)
            return {
                "phase": phase,
                "conditions": [
                    condition("PodScheduled", True),
                    condition("Initialized", self.initialized, "ContainersNotInitialized"),
                    condition("Ready", ready, not_ready_reason),
                    condition("ContainersReady", ready, not_ready_reason),
                ],
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": self.started_at,
                "initContainerStatuses": [self.states[c["name"]].status() for c in self.init_specs],
                "containerStatuses": [self.states[c["name"]].status() for c in self.specs],
            }

    def publish(self) -> None:
        """Writes the whole status through pods/status (the agent owns these pods' status)."""
        with self.status_lock:
            try:
                self.ctx.api.merge_patch("Pod", self.name, {"status": self.status()}, self.namespace, "status")
            except (ApiError, OSError) as error:
                if getattr(error, "status", None) != 404:
                    agent_log(f"status of pod {self.namespace}/{self.name}: {error}")

    def event(self, kind: str, reason: str, container: str, message: str) -> None:
        stamp = now_rfc3339()
        try:
            self.ctx.api.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{self.name}.{os.urandom(8).hex()}", "namespace": self.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "namespace": self.namespace,
                                   "uid": self.uid, "fieldPath": f"spec.containers{{{container}}}"},
                "reason": reason, "message": message, "type": kind, "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": self.pod["spec"].get("nodeName", "")},
            })
        except (ApiError, OSError) as error:
            agent_log(f"event {reason} of pod {self.namespace}/{self.name}: {error}")


def exited_marker(log_file: Path) -> Path:
    """Next to a container log: the container has exited. kwok (patched by build-binaries.sh)
    then ends a `follow` of that log at its end, as the kubelet does when a container stops."""
    return log_file.with_name(log_file.name + ".exited")


def mark_exited(log_file: Path) -> None:
    with contextlib.suppress(OSError):
        exited_marker(log_file).touch()


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signals a container's process group (its leader's pid is the group id: own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds on zombies too: alive only if some member is not one.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def agent_log(message: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} node-agent: {message}", flush=True, file=sys.stderr)
