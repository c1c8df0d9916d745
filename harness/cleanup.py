"""Remove what interrupted runs left: namespaces labelled managed-by=kubetest2-training, and the
add-ons (device plugins, mpi-operator) a run installed and could not remove.

    python -m harness.cleanup [--kubeconfig PATH] [--run-id ID] [--older-than 1h] [--dry-run]

Every object the tests create lives in a per-run namespace carrying the managed-by and run-id
labels, so deleting those namespaces removes them; the add-ons' objects carry the same labels
(harness/setup/addons.py). The cluster-scoped RBAC of manifests/rbac.yaml is left alone: it is
installed on purpose.

May import: harness.errors, harness.config, harness.cluster, harness.setup.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from harness.cluster.client import Cluster
from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL, RUN_ID_LABEL
from harness.cluster.resources import NAMESPACE, Obj
from harness.config.values import parse_duration
from harness.errors import ClusterError
from harness.setup.addons import ADDONS, addon_objects, describe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.cleanup", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, then ~/.kube/config")
    parser.add_argument("--run-id", help="only this run's namespaces (KUBETEST2_RUN_ID)")
    parser.add_argument("--older-than", default="0", help="only namespaces older than this Go duration")
    parser.add_argument("--dry-run", action="store_true", help="list, do not delete")
    args = parser.parse_args(argv)
    try:
        min_age = parse_duration(args.older_than)
    except ValueError:
        parser.error(f"--older-than={args.older_than!r} is invalid: expected a Go duration like 1h")
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    if args.run_id:
        selector += f",{RUN_ID_LABEL}={args.run_id}"
    try:
        cluster = Cluster.connect(args.kubeconfig, retry_budget=10)
        leftovers = cluster.list(NAMESPACE, label_selector=selector)["items"] + addon_leftovers(cluster, args.run_id)
        now = datetime.now(timezone.utc)
        for obj in leftovers:
            meta = obj["metadata"]
            created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
            if (now - created).total_seconds() < min_age:
                continue
            print(f"{'would delete' if args.dry_run else 'deleting'} {describe(obj)} "
                  f"(run {meta.get('labels', {}).get(RUN_ID_LABEL, '?')}, created {meta['creationTimestamp']})")
            if not args.dry_run:
                cluster.delete(cluster.resource(obj["apiVersion"], obj["kind"]), meta["name"], meta.get("namespace"))
    except ClusterError as exc:
        print(f"harness.cleanup: {exc}", file=sys.stderr)
        return 2
    return 0


def addon_leftovers(cluster: Cluster, run_id: str | None) -> list[Obj]:
    """The add-ons' objects on the cluster that a run of ours installed (its labels say so)."""
    found = []
    for addon in ADDONS:
        for obj in addon_objects(addon, run_id or ""):
            meta = obj["metadata"]
            live = cluster.get(cluster.resource(obj["apiVersion"], obj["kind"]), meta["name"], meta.get("namespace"))
            labels = (live or {}).get("metadata", {}).get("labels") or {}
            if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and (not run_id or labels.get(RUN_ID_LABEL) == run_id):
                found.append({**live, "apiVersion": obj["apiVersion"], "kind": obj["kind"]})
    return found


if __name__ == "__main__":
    sys.exit(main())
