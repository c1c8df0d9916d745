"""The cluster: the Kubernetes client (client), where each kind lives (resources), the labels every
object carries, what an object's status says (pods), manifests rendered from templates, log
capture, the watch machinery, waiting (wait) on named conditions, and the cancel token waits watch.

May import: harness.errors, harness.config.
"""
