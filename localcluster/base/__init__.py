"""What every part of the local cluster stands on: its settings (ports, folders, state), the
annotations and labels its agent reads, the address plan of the cluster's networks (layout), Linux
calls through libc (linux), and the table of system packages each part needs (system_packages).

May import: nothing of the local cluster.
"""
