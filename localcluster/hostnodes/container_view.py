"""What one container's process gets on a kwok node: its argv, its environment and its working folder.

The image is not pulled: the project's venv stands in for it (first on PATH). On top come the
container's declared env (container_env.py), cluster names and ports rewritten for 127.0.0.1
(loopback_names.py) and its paths mapped into the pod's scratch folder (volumes.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.hostnodes.container_env import PodObjects, declared_env, expand
from localcluster.hostnodes.loopback_names import LoopbackNames
from localcluster.hostnodes.volumes import PathMap, mount_volumes


@dataclass(frozen=True)
class PodView:
    """What every container of one pod shares."""

    pod: dict[str, Any]
    objects: PodObjects
    names: LoopbackNames
    scratch_dir: Path
    venv_bin: Path


@dataclass
class ContainerView:
    """One container run's process: argv, env, cwd, and its paths (for adaptations such as mpi_pods)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    paths: PathMap


def image_env(view: PodView, paths: PathMap) -> dict[str, str]:
    """What the image would set (PATH: the venv stands in for the image), before the pod's own."""
    return {
        "PATH": f"{view.venv_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOSTNAME": view.names.hostname,
        "TMPDIR": paths.local("/tmp") or "/tmp",
    }


def container_view(view: PodView, spec: dict[str, Any]) -> ContainerView:
    """argv, environment and working folder of one container run (its volumes written first)."""
    paths = mount_volumes(view.pod, spec, view.scratch_dir, view.objects)
    declared = declared_env(spec, view.pod, view.objects)
    argv = [expand(arg, declared.get) for arg in [*(spec.get("command") or []), *(spec.get("args") or [])]]
    env = image_env(view, paths)
    env.update({k: paths.rewrite(view.names.env_value(k, v)) for k, v in declared.items()})
    argv = [paths.rewrite(arg) for arg in view.names.argv(argv)]
    working_dir = spec.get("workingDir")
    cwd = working_dir if working_dir and Path(working_dir).is_dir() else str(view.scratch_dir)
    return ContainerView(argv, env, cwd, paths)
