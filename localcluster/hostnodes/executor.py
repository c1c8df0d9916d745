"""Runs a pod's containers as local processes: the kubelet's container side for kwok's nodes.

Each container's command and args run in a session of their own (its "container": a signal reaches
every process of it, sessions.py), with the view container_view.py gives it: environment, PATH
starting with the project's venv (it stands in for the image, which is not pulled), cwd, /tmp and
volumes in the pod's scratch folder. stdout and stderr go, line by line as written, to the
CRI-format file that kwok serves through `pods/log` (cri_log.py). Exit codes become container
states and the pod's phase (pod_status.py); the restart policy restarts containers (restartCount,
lastState, the previous run's log kept); deleting the pod stops them (SIGTERM, SIGKILL after the
grace period), as the kubelet does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.control.api import ApiClient, ApiError
from localcluster.hostnodes.container_env import ContainerConfigError
from localcluster.hostnodes.container_view import ContainerView, PodView, container_view
from localcluster.hostnodes.cri_log import CriLogWriter, mark_exited, rotate_log
from localcluster.hostnodes.pod_status import ContainerState, PodReporter, PodState, agent_log, now_rfc3339
from localcluster.hostnodes.sessions import container_alive, signal_container

# Restart back-off: 1 s doubling to 20 s (the kubelet's is 10 s to 5 min; tests need it shorter).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 20.0
STOP_GRACE_DEFAULT_S = 30
# A container's view after container_view.py, for pods that need more (mpi_pods.py).
ViewAdapter = Callable[[dict[str, Any], ContainerView], ContainerView]


@dataclass
class PodContext:
    """What every container of one pod shares: the API, its folders, its view, an optional adapter."""

    api: ApiClient
    logs_dir: Path
    view: PodView
    adapt: ViewAdapter | None = None
    # Called with container sessions before the agent signals them: whoever holds them stopped
    # (a slow node, slow_nodes.py) resumes them, since a stopped process never handles SIGTERM.
    before_signal: Callable[[list[int]], None] | None = None

    @property
    def pod(self) -> dict[str, Any]:
        return self.view.pod


class PodRun:
    """A pod executed for real: its containers' processes and their states (see the module docstring)."""

    def __init__(self, ctx: PodContext, on_done: Callable[[PodRun], None]) -> None:
        self.ctx = ctx
        meta, spec = ctx.pod["metadata"], ctx.pod["spec"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.node = spec.get("nodeName", "")
        self.on_done = on_done
        self.init_specs = list(spec.get("initContainers") or [])
        self.specs = list(spec["containers"])
        self.state = PodState(spec.get("restartPolicy", "Always"),
                              [ContainerState(c["name"], c.get("image", ""), True) for c in self.init_specs],
                              [ContainerState(c["name"], c.get("image", ""), False) for c in self.specs],
                              initialized=not self.init_specs)
        self.states = {s.name: s for s in [*self.state.init, *self.state.main]}
        self.reporter = PodReporter(ctx.api, ctx.pod)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        # Set when the pod was deleted (then removed once stopped); not when the agent itself stops.
        self.deleted = threading.Event()
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
                    return
            self.state.initialized = True
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
            if not self._restarts(state, exit_code) or self.stopping.is_set():
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
                self.reporter.event("Warning", "BackOff", spec["name"], "Back-off restarting failed container "
                                    f"{spec['name']} in pod {self.name}")
            if self.stopping.wait(backoff):
                return False
            rotate_log(self.log_path(spec["name"]))

    def _restarts(self, state: ContainerState, exit_code: int) -> bool:
        policy = self.state.restart_policy
        if state.init and policy == "Always":
            return exit_code != 0  # an init container runs to completion once
        return policy == "Always" or (policy == "OnFailure" and exit_code != 0)

    def _run_once(self, spec: dict[str, Any], state: ContainerState) -> int:
        name = spec["name"]
        log = CriLogWriter(self.log_path(name))
        started = now_rfc3339()
        try:
            view = self.command(spec)
        except (ContainerConfigError, ApiError) as error:
            return self._not_started(state, log, started, "CreateContainerConfigError", str(error))
        argv = view.argv
        resolved = shutil.which(argv[0], path=view.env.get("PATH")) if "/" not in argv[0] else argv[0]
        if not resolved or not os.access(resolved, os.X_OK):
            message = (f"failed to create containerd task: exec: {argv[0]!r}: executable file not found in $PATH "
                       f"(local execution: the image {spec.get('image')} is not pulled; PATH={view.env.get('PATH')})")
            return self._not_started(state, log, started, "StartError", message)
        with self.lock:
            if self.stopping.is_set():
                log.close()
                return 137
            # argv[0] stays as written, as a runtime execs it (mpirun given by its full path takes it
            # for --prefix and changes the command its daemons get).
            process = subprocess.Popen(argv, executable=resolved, env=view.env, cwd=view.cwd, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            self.processes[name] = process
            state.pid = process.pid
            state.state = {"running": {"startedAt": started}}
        self.publish()
        self.reporter.event("Normal", "Started", name,
                            f"Started container {name} as local process {process.pid} ({' '.join(argv)[:300]}); "
                            f"stands in for image {spec.get('image')} (not pulled)")
        exit_code = self._wait_container(process, log)
        mark_exited(self.log_path(name))
        with self.lock:
            self.processes.pop(name, None)
            state.state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                          "startedAt": started, "finishedAt": now_rfc3339(),
                                          "containerID": f"kt2t-local://{process.pid}"}}
        return exit_code

    def _wait_container(self, process: subprocess.Popen[bytes], log: CriLogWriter) -> int:
        """Copies the output into the log until the main process exits; its exit code (128+signal)."""
        readers = [threading.Thread(target=log.pump, args=(pipe, stream), daemon=True)
                   for pipe, stream in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
        for reader in readers:
            reader.start()
        code = process.wait()
        # The container ends with its main process: the rest of it goes too (a runtime kills the
        # container's pid namespace), so no orphan outlives the pod.
        self._signal_sessions([process.pid], signal.SIGKILL)
        for reader in readers:
            reader.join(timeout=10)
        log.close()
        return 128 - code if code < 0 else code

    def _not_started(self, state: ContainerState, log: CriLogWriter, started: str, reason: str, message: str) -> int:
        log.note(f"node agent: {reason}: {message}")
        log.close()
        mark_exited(self.log_path(state.name))
        with self.lock:
            state.pid = None
            state.state = {"terminated": {"exitCode": 128, "reason": reason, "message": message,
                                          "startedAt": started, "finishedAt": now_rfc3339()}}
        self.reporter.event("Warning", "Failed", state.name, f"Error: {message}")
        return 128

    def sessions(self) -> list[int]:
        """The session ids of the running containers."""
        with self.lock:
            return [p.pid for p in self.processes.values()]

    def signal_all(self, sig: signal.Signals) -> list[int]:
        """Signals every running container; their session ids."""
        sessions = self.sessions()
        self._signal_sessions(sessions, sig)
        return sessions

    def _signal_sessions(self, sessions: list[int], sig: signal.Signals) -> None:
        """Every signal to a container goes through here: resumed first (PodContext.before_signal)."""
        if self.ctx.before_signal is not None:
            self.ctx.before_signal(sessions)
        for session in sessions:
            signal_container(session, sig)

    def stop(self, grace_s: float) -> None:
        """Pod deleted: SIGTERM every container, SIGKILL what is left after grace_s."""
        self.stopping.set()
        sessions = self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(container_alive(s) for s in sessions):
            time.sleep(0.1)
        self._signal_sessions(sessions, signal.SIGKILL)
        self.finished.wait(timeout=15)

    def kill_now(self) -> None:
        """Pod gone from the API (forced deletion): no grace left."""
        self.stopping.set()
        self.signal_all(signal.SIGKILL)

    # ---- the container's view and files ---------------------------------------------------------

    def command(self, spec: dict[str, Any]) -> ContainerView:
        """argv, environment and working folder of one container run (container_view.py)."""
        view = container_view(self.ctx.view, spec)
        return self.ctx.adapt(spec, view) if self.ctx.adapt else view

    def log_path(self, container: str) -> Path:
        return self.ctx.logs_dir / container / "0.log"

    # ---- status ---------------------------------------------------------------------------------

    def publish(self) -> None:
        """Writes the whole status through pods/status."""
        def status() -> dict[str, Any]:
            with self.lock:
                return self.state.status(self.uid, self.state.phase(self.finished.is_set(), self.stopping.is_set()))

        self.reporter.publish(status)
