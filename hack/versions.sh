# Pinned versions of the Go binaries and where they are cached (sourced by hack/ scripts).
# The k8s version must match the require line in hack/go/kubernetes/go.mod.
export K8S_VERSION=v1.34.4
# etcd is built from the kubernetes module: keep this equal to its go.mod's etcd/server/v3.
export ETCD_VERSION=v3.6.4
export KWOK_VERSION=v0.7.0
export MPI_OPERATOR_VERSION=v0.7.0
# Kubeflow Trainer v2 and the JobSet version its go.mod pins (hack/go/trainer, hack/go/jobset).
export TRAINER_VERSION=v2.1.0
export JOBSET_VERSION=v0.10.1
# DLRover's ElasticJob operator: the pseudo-version of its Go module that hack/go/dlrover pins (the
# proxy lists none). The `dlrover` Python package is the workloads image's (workloads/Dockerfile).
export DLROVER_OPERATOR_VERSION=v0.0.0-20250112051702-70bc9086106a
# kubetest2 is unversioned: a pseudo-version served by the Go module proxy.
export KUBETEST2_VERSION=v0.0.0-20240309080311-0d7ca9ccb41e
export KT2T_CACHE=${KT2T_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetest2-training}
export KT2T_BIN=$KT2T_CACHE/bin
# CoreDNS of the real nodes (hack/go/coredns/go.mod pins it): the version kubeadm 1.34 installs.
export COREDNS_VERSION=v1.12.1
