"""Node emulation: nodes shaped like GPU instances (nodes), slow nodes (slow_nodes), a node's own
CPUs (node_cpus), GPU sharing as a device plugin advertises it (gpu_sharing), and pods served
canned logs instead of running (canned_pods).

May import: localcluster.base, localcluster.control, localcluster.hostnodes.
"""
