"""Real nodes of the local cluster: each a kubelet and a containerd of its own, in network
namespaces the cluster creates, beside the kwok nodes (`hack/local-cluster up --real-nodes N`).

layout.py (names, addresses, folders), preflight.py (root, commands), network.py (namespaces,
bridge, veths, routes), linux.py (setns, unshare, mounts, cgroups through libc), holder.py (the
node's mount namespace), netd.py (the API server's way in, the pods' way to the API server),
configs.py (containerd, CNI, kubelet, kube-proxy, CoreDNS), images.py (the minimal test images),
manager.py (up, down, status), cleanup.py (what a crashed cluster left).
"""
