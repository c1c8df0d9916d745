"""The tests of e2e-nvidia-training (testbins/e2e_nvidia_training.py declares the suite from them),
one module per upstream file of aws-k8s-tester's test/cases/nvidia-training/ or per test of ours:

| module   | upstream file            | tests                                   |
|----------|--------------------------|-----------------------------------------|
| common   | (this project's)         | (workload_size, succeeded_and_assessed) |
| bert     | bert_training_test.go    | TestBertTraining                        |
| training | (this project's)         | TestNanoGPTTraining, TestMNISTTraining  |
| elastic  | (this project's)         | TestElasticRecovery                     |

May import: harness, testbins.nvidia_training.
"""
