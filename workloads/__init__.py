"""The training programs the pods run (nanoGPT, BERT, MNIST, all-reduce, probes) and the lines they
print for the harness to read: shipped in the workloads image, so they import no package of this
repository but their own (the harness reads their output, never their code at run time).

May import: nothing of another package.
"""
