"""hack/images: build this project's container images with buildah, as their Dockerfiles ship, cache and import them
(images/README.md)."""

from __future__ import annotations

import argparse
import json

from localcluster.images import build, names
from localcluster.images.specs import SPECS
from localcluster.images.tools import locked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/images", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    choices = list(SPECS)
    p = commands.add_parser("build", help="build the images (default: all) and what they build on; "
                                                "cached by input hash")
    p.add_argument("images", nargs="*", choices=[[], *choices], metavar="IMAGE", help=f"of {', '.join(choices)}")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has the image")
    p = commands.add_parser("push", help="push built images to a registry with buildah (plain HTTP for one on "
                                         "127.0.0.1, e.g. `hack/local-cluster registry`); prints each reference")
    p.add_argument("registry", help="host[:port][/path], e.g. 127.0.0.1:25010 or "
                                    "<account>.dkr.ecr.<region>.amazonaws.com")
    p.add_argument("images", nargs="*", choices=[[], *choices], metavar="IMAGE", help=f"of {', '.join(choices)} "
                                                                                       "(default: all built)")
    p = commands.add_parser("import", help="import built images into a containerd (ctr images import)")
    p.add_argument("--address", required=True, help="containerd's socket")
    p.add_argument("--namespace", default="k8s.io", help="containerd namespace (default: k8s.io, the CRI's)")
    p.add_argument("images", nargs="*", metavar="IMAGE", help=f"of {', '.join(choices)} (default: all)")
    commands.add_parser("list", help="each image: reference, built or not, archive, sizes and times (JSON)")
    p = commands.add_parser("path", help="the OCI archive of an image's current inputs (last line)")
    p.add_argument("image", choices=choices)
    p = commands.add_parser("name", help="an image's full reference, e.g. `name pause` for containerd's sandbox_image")
    p.add_argument("image", choices=choices)
    commands.add_parser("disk", help="bytes used by the archives, buildah's store and its cache mounts (JSON)")
    p = commands.add_parser("clean", help="remove the archives and buildah's images (default: both)")
    p.add_argument("--archives", action="store_true", help="only the archives in the cache")
    p.add_argument("--store", action="store_true", help="only buildah's images of ours and the stand-in bases")
    p.add_argument("--all", action="store_true", help="both, plus pip's build cache and downloaded sources")
    args = parser.parse_args(argv)
    # Builds and cleans change buildah's store and the cache: one at a time. Reading (import, list)
    # needs no lock: an archive is renamed into place whole.
    if args.command in ("build", "clean", "push"):
        with locked():
            return run(args, parser)
    return run(args, parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    choices = list(SPECS)

    if args.command == "build":
        for image in build.build(args.images, force=args.force):
            print(image.archive)
    elif args.command == "push":
        for reference in build.push(args.images, args.registry):
            print(reference)
    elif args.command == "import":
        for name in args.images:
            if name not in SPECS:
                parser.error(f"unknown image {name!r}: expected one of {', '.join(choices)}")
        build.import_into(args.images, args.address, args.namespace)
    elif args.command == "list":
        print(json.dumps(build.listing(), indent=2))
    elif args.command == "path":
        print(build.cached(args.image).archive)
    elif args.command == "name":
        print(names.reference(args.image))
    elif args.command == "disk":
        print(json.dumps(build.disk(), indent=2))
    elif args.command == "clean":
        only = args.archives or args.store
        build.clean(archives=args.all or args.archives or not only, store=args.all or args.store or not only,
                    caches=args.all)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
