"""Every suite of the project, in the order the docs and the kubetest2 tester list them. Imported only
where all of them are needed (the tester plugin, the generated docs): a binary's `--help` loads its own."""

from __future__ import annotations

from harness.framework.suite import Suite


def all_suites() -> tuple[Suite, ...]:
    from testbins import (
        e2e_nvidia,
        e2e_nvidia_training,
        nvidia_cuda_compute,
        nvidia_dra,
        nvidia_driver_liveness,
        nvidia_fabric_manager,
        nvidia_gsp_firmware,
        nvidia_inference,
        nvidia_persistence_device_nodes,
        nvidia_shared_libraries,
    )

    return (e2e_nvidia_training.SUITE, e2e_nvidia.SUITE, nvidia_driver_liveness.SUITE, nvidia_cuda_compute.SUITE,
            nvidia_fabric_manager.SUITE, nvidia_gsp_firmware.SUITE, nvidia_persistence_device_nodes.SUITE,
            nvidia_shared_libraries.SUITE, nvidia_inference.SUITE, nvidia_dra.SUITE)


def upstream_gpu_suites() -> tuple[Suite, ...]:
    """upstream's newer GPU suites (testbins/nvidia_node/), one binary each: the node checks and nvidia-dra."""
    return all_suites()[2:]


def gpu_node_suites() -> tuple[Suite, ...]:
    """upstream's GPU node suites: a check (or one job) per node, judged node by node."""
    return upstream_gpu_suites()[:-1]
