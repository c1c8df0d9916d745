"""Real nodes of the local cluster: each a kubelet and a containerd of its own, in network
namespaces the cluster creates, beside the kwok nodes (`hack/local-cluster up --real-nodes N`).

preflight.py (root, commands), network.py (namespaces, bridge, veths, routes), holder.py (the
node's mount namespace), netd.py (the API server's way in, the pods' way to the API server, the
nodes' way to the registry), registry.py (the image registry the nodes pull from), configs.py
(containerd, CNI, kubelet, kube-proxy, CoreDNS), images.py (the minimal test images), manager.py
(up, down, status), cleanup.py (what a crashed cluster left).
The address plan (layout.py) and the libc calls (linux.py) are localcluster.base's.

May import: localcluster.base, localcluster.control, localcluster.emulation.
"""
