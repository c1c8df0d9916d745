"""hack/images: builds this project's container images with buildah, as their Dockerfiles ship,
against reproducible local stand-ins for the bases no registry serves here, into a cache keyed by
a hash of each image's inputs, and imports them into a containerd. See images/README.md.

Modules: names (the images' names and tags), specs (what each is built from; the input hash),
bases (the stand-in bases), build (build, export, import, clean), tools (running commands),
__main__ (the command line).

May import: localcluster.base.
"""
