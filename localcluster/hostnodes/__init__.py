"""The host-process node runtime: a pod's containers run as local processes (executor), with the
environment, volumes and names a kubelet would give them (container_env, container_view, volumes,
loopback_names, pod_files), their logs (cri_log), sessions (sessions), status (pod_status), and
MPIJob pods reaching each other through an ssh stand-in (mpi_pods, ssh_standin).

May import: localcluster.base, localcluster.control.
"""
