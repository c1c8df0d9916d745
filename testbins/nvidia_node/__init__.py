"""The tests of upstream aws-k8s-tester's GPU node suites, one binary each under upstream's name
(testbins/nvidia_*.py declare them), one module per upstream suite folder (test/cases/<folder>/):

| module           | upstream folder (binary: <folder>.test) | tests                                         |
|------------------|-----------------------------------------|-----------------------------------------------|
| common           | (a check script per node, judged there) |                                               |
| driver_liveness  | nvidia-driver-liveness                  | TestDriverLiveness                            |
| cuda_compute     | nvidia-cuda-compute                     | TestCUDACompute                               |
| fabric_manager   | nvidia-fabric-manager                   | TestFabricManagerVersionMatchesDriver,        |
|                  |                                         | TestFabricAndNVLinkInContainer                |
| gsp_firmware     | nvidia-gsp-firmware                     | TestGSPFirmware                               |
| device_nodes     | nvidia-persistence-device-nodes         | TestDeviceNodes                               |
| shared_libraries | nvidia-shared-libraries                 | TestSharedLibraries                           |
| inference        | nvidia-inference                        | TestBertInference                             |
| dra              | nvidia-dra                              | TestGPUPresentLabel, TestNvidiaDRAMultiNode   |

nvidia-dra's MPIJob claims its workers' GPUs and EFAs through DRA ResourceClaims (dra.py).
The scripts the pods run are files in manifests/scripts/ (`*-check.sh`); docs/DROP-IN.md lists what
each asserts and where this project judges more than upstream.

May import: harness, testbins.nvidia, testbins.nvidia_node.
"""
