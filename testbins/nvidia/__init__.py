"""The tests of e2e-nvidia (testbins/e2e_nvidia.py declares the suite from them), one module per
upstream file of aws-k8s-tester's test/cases/nvidia/ (shell scripts the pods run are files in
manifests/scripts/; flows both sharing modes run live in harness/):

| module          | upstream file                                   | tests                                  |
|-----------------|-------------------------------------------------|----------------------------------------|
| common          | main_test.go (its shared helpers)               | (require_gpus, first_match)            |
| mpi             | mpi_test.go                                     | TestMPIJobPytorchTraining              |
| unit            | unit_test.go                                    | TestSingleNodeUnitTest                 |
| capabilities    | capabilities_test.go                            | TestNvidiaDriverCapabilities           |
| dcgm            | dcgm_test.go                                    | TestDcgmDiagnostics                    |
| containerd      | containerd_test.go                              | TestContainerdConfig                   |
| gpu_sharing     | gpu_sharing_test.go, time_slicing_test.go,      | TestTimeSlicing, TestMps               |
|                 | mps_test.go                                     |                                        |
| nccl            | (this project's)                                | TestNCCLAllReduce, TestNCCLTests       |
| capacity        | (this project's)                                | TestGPUCapacity                        |
| node_pairs      | (this project's)                                | TestNodePairs                          |

Named without upstream's `_test` suffix: pytest would collect `*_test.py` as test files.

May import: harness, testbins.nvidia.
"""
