#!/usr/bin/env bash
# Renders the pinned Kubeflow Trainer and JobSet add-on manifests from the Go modules that
# hack/go/trainer and hack/go/jobset pin (the versions the local cluster runs), so the pin is
# reproducible: rerun it after changing TRAINER_VERSION/JOBSET_VERSION (hack/versions.sh) and the
# go.mod files, and commit the result.
#   manifests/addons/trainer.yaml                    kustomize build of the module's
#       manifests/overlays/manager (the upstream install) without its ../../third-party/jobset
#       line, as upstream's comment says to do when JobSet is installed separately: JobSet comes
#       from jobset.yaml (its third-party kustomization only fetches that same release over HTTP)
#   manifests/addons/jobset.yaml                     kustomize build of JobSet's config/default
#       (what its `make artifacts` publishes as the release's manifests.yaml)
#   manifests/addons/torch-distributed-runtime.yaml  the module's
#       manifests/base/runtimes/torch_distributed.yaml, verbatim
# Needs go (module download) and kubectl (its built-in kustomize). Usage: hack/render-trainer-manifests.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
out=$repo/manifests/addons

trainer_src=$("$here/build-binaries.sh" module-dir trainer github.com/kubeflow/trainer/v2)
jobset_src=$("$here/build-binaries.sh" module-dir jobset sigs.k8s.io/jobset)
kustomize_version=$(kubectl version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kustomizeVersion"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# go.sum's hash of the module's source tree: what `go mod download` verified.
module_hash() { awk -v m="$1" -v v="$2" '$1 == m && $2 == v {print $3}' "$3"; }
trainer_hash=$(module_hash github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" "$here/go/trainer/go.sum")
jobset_hash=$(module_hash sigs.k8s.io/jobset "$JOBSET_VERSION" "$here/go/jobset/go.sum")
[[ -n $trainer_hash && -n $jobset_hash ]] || { echo "render-trainer-manifests: no go.sum hash for the pinned modules" >&2; exit 1; }

# header FILE LINES...: FILE starts with LINES, each as a comment.
header() { local file=$1; shift; printf '# %s\n' "$@" >"$file"; }

cp -r "$trainer_src/manifests" "$work/trainer" && chmod -R u+w "$work/trainer"
kustomization=$work/trainer/overlays/manager/kustomization.yaml
grep -q '^ *- \.\./\.\./third-party/jobset' "$kustomization" \
  || { echo "render-trainer-manifests: no third-party/jobset line in $trainer_src/manifests/overlays/manager/kustomization.yaml" >&2; exit 1; }
sed -i '/^ *- \.\.\/\.\.\/third-party\/jobset/d' "$kustomization"
header "$out/trainer.yaml.partial" \
  "Kubeflow Trainer $TRAINER_VERSION, pinned: installed by the suites when a test runs TrainJobs and the cluster does not" \
  "serve the TrainJob CRD (INSTALL_TRAINER, default true), with JobSet (jobset.yaml); what a run created is removed." \
  "Source: Go module github.com/kubeflow/trainer/v2@$TRAINER_VERSION ($trainer_hash)," \
  "rendered by hack/render-trainer-manifests.sh: kustomize $kustomize_version build of manifests/overlays/manager" \
  "without its '../../third-party/jobset' resource (upstream: \"Comment this line if JobSet is installed\")." \
  "Namespace kubeflow-system; the controller manages its own webhook certificate (Secret kubeflow-trainer-webhook-cert)."
kubectl kustomize "$work/trainer/overlays/manager" >>"$out/trainer.yaml.partial"

cp -r "$jobset_src/config" "$work/jobset" && chmod -R u+w "$work/jobset"
header "$out/jobset.yaml.partial" \
  "JobSet $JOBSET_VERSION, pinned (the version Kubeflow Trainer $TRAINER_VERSION's go.mod requires): installed with trainer.yaml." \
  "Source: Go module sigs.k8s.io/jobset@$JOBSET_VERSION ($jobset_hash)," \
  "rendered by hack/render-trainer-manifests.sh: kustomize $kustomize_version build of config/default" \
  "(what upstream's \`make artifacts\` publishes as the release's manifests.yaml)." \
  "Namespace jobset-system; the controller manages its own webhook certificate (Secret jobset-webhook-server-cert)."
kubectl kustomize "$work/jobset/default" >>"$out/jobset.yaml.partial"

runtime=$trainer_src/manifests/base/runtimes/torch_distributed.yaml
header "$out/torch-distributed-runtime.yaml.partial" \
  "The torch-distributed ClusterTrainingRuntime of Kubeflow Trainer $TRAINER_VERSION: installed by the suites when a" \
  "TrainJob test runs and the cluster has none, removed after. Source: Go module" \
  "github.com/kubeflow/trainer/v2@$TRAINER_VERSION ($trainer_hash) manifests/base/runtimes/torch_distributed.yaml," \
  "verbatim (sha256 $(sha256sum "$runtime" | cut -d' ' -f1)); copied by hack/render-trainer-manifests.sh."
echo "---" >>"$out/torch-distributed-runtime.yaml.partial"
cat "$runtime" >>"$out/torch-distributed-runtime.yaml.partial"

for name in trainer jobset torch-distributed-runtime; do
  mv "$out/$name.yaml.partial" "$out/$name.yaml"
  echo "$out/$name.yaml"
done
