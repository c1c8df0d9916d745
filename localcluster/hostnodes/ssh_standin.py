"""ssh and sshd stand-ins for MPIJob pods on the local cluster: mpirun reaches its workers (hack/README.md).

No network login happens on one machine: the `ssh` a launcher runs hands its remote command to the
`sshd` stand-in that runs as the named worker pod's container, which starts it there.

- `sshd` (a worker's container, instead of `/usr/sbin/sshd -De`): listens on an abstract Unix
  socket named after the pod's uid. Each session runs `<shell> -c <command>` as a child of this
  process, so in the worker's container (its session: deleting the pod kills it), its working
  folder and /tmp, with an sshd-like environment (not the container's env: sshd does not pass it
  on, which is why mpirun forwards variables with `-x`), under the pod's hostname (own UTS
  namespace when allowed). The command gets the caller's own stdin, stdout and stderr (passed
  over the socket), so its output reaches the launcher's log as through ssh. A session is
  accepted only when the caller's public key is in the worker's authorized_keys (a check of the
  mounted Secret, not a key exchange).
- `ssh [options] [user@]host command...` (first on the pod's PATH): maps the host name to its pod
  as the cluster DNS would (`<hostname>.<subdomain>.<namespace>.svc[.cluster.local]`, or a shorter
  name through the pod's search domains; a registry the node agent keeps, `<state>/pod-dns`),
  connects (retrying `-o ConnectionAttempts=N` times, 1 s apart), and exits with the remote
  command's status (255 when ssh itself fails, as ssh does).

Standard library only: it runs under the node agent's Python, in any pod.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

STANDIN_SCRIPT = Path(__file__).resolve()
SSH_FAILED = 255
CLONE_NEWUTS = 0x04000000
# ssh's options that take a value (man ssh); the others are flags.
SSH_VALUE_OPTIONS = set("BbcDEeFIiJLlmOopQRSWw")
FQDN = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$")
PUBLIC_KEY_FILES = ("id_rsa.pub", "id_ecdsa.pub", "id_ed25519.pub")
MAX_MESSAGE = 1 << 20
SSH_CONNECTION = "127.0.0.1 0 127.0.0.1 22"


def log(message: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} sshd stand-in: {message}", file=sys.stderr, flush=True)


def public_keys(text: str) -> set[tuple[str, str]]:
    """(type, base64) of every key line (options and comments ignored)."""
    keys = set()
    for line in text.splitlines():
        fields = line.split()
        for i, field in enumerate(fields[:-1]):
            if field.startswith(("ssh-", "ecdsa-", "sk-")):
                keys.add((field, fields[i + 1]))
                break
    return keys


# ---- sshd ----------------------------------------------------------------------------------------


def take_hostname(hostname: str) -> None:
    """The pod's hostname for its sessions (gethostname() in orted and the ranks), in a UTS
    namespace of this process; without the privilege the machine's stays, which OpenMPI tolerates."""
    libc = ctypes.CDLL(None, use_errno=True)
    name = hostname.encode()
    if libc.unshare(CLONE_NEWUTS) != 0 or libc.sethostname(name, len(name)) != 0:
        log(f"hostname stays {socket.gethostname()!r} ({os.strerror(ctypes.get_errno())})")


def serve(args: argparse.Namespace) -> int:
    take_hostname(args.hostname)
    env = dict(item.split("=", 1) for item in args.env)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + args.socket)
    listener.listen(64)
    log(f"listening as {args.hostname} on @{args.socket} (no real sshd: hack/README.md)")
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=session, args=(connection, args.authorized_keys, env), daemon=True).start()


def session(connection: socket.socket, authorized_keys: str, env: dict[str, str]) -> None:
    with connection:
        message, fds, _, _ = socket.recv_fds(connection, MAX_MESSAGE, 3)
        try:
            request = json.loads(message or b"{}")
            caller = request.get("from", "?")
            refusal = refused(request, authorized_keys) if len(fds) == 3 else "stdin, stdout and stderr not passed"
            if refusal:
                log(f"Connection closed by {caller}: {refusal}")
                connection.send(json.dumps({"error": refusal}).encode())
                return
            log(f"Accepted publickey for {env.get('USER', 'root')} from {caller}: {request['command'][:300]}")
            child = subprocess.Popen([env.get("SHELL", "/bin/sh"), "-c", request["command"]], stdin=fds[0],
                                     stdout=fds[1], stderr=fds[2], env={**env, "SSH_CONNECTION": SSH_CONNECTION})
        finally:
            for fd in fds:
                os.close(fd)
        code = child.wait()
        log(f"session from {caller} ended: {f'exit {code}' if code >= 0 else f'signal {-code}'}")
        connection.send(json.dumps({"status": code if code >= 0 else SSH_FAILED}).encode())


def refused(request: dict[str, str], authorized_keys: str) -> str:
    """Why the session is refused ('' when accepted): the caller's key must be authorized here."""
    try:
        allowed = public_keys(Path(authorized_keys).read_text()) if authorized_keys else set()
    except OSError:
        allowed = set()
    offered = public_keys(request.get("key") or "")
    return "" if offered & allowed else "Permission denied (publickey)."


# ---- ssh -----------------------------------------------------------------------------------------


def parse_ssh(argv: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """ssh's command line -> (-o options, host, remote command words)."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        letters = argv[i][1:]
        for index, letter in enumerate(letters):
            if letter in SSH_VALUE_OPTIONS:
                value = letters[index + 1:] or (argv[i + 1] if i + 1 < len(argv) else "")
                i += 0 if letters[index + 1:] else 1
                if letter == "o":
                    key, _, val = value.replace("=", " ", 1).partition(" ")
                    options[key.lower()] = val.strip()
                break
        i += 1
    i += 1 if i < len(argv) and argv[i] == "--" else 0
    if i >= len(argv):
        raise SystemExit("usage: ssh [options] [user@]host command")
    return options, argv[i].rpartition("@")[2], argv[i + 1:]


def resolve(host: str, registry: Path, searches: list[str]) -> dict[str, str] | None:
    """The pod a cluster DNS name points at (the registry's entry), trying the search domains."""
    host = host.lower().rstrip(".")
    for candidate in [host, *(f"{host}.{domain}" for domain in searches)]:
        match = FQDN.match(candidate + ".cluster.local" if candidate.endswith(".svc") else candidate)
        if match:
            hostname, subdomain, namespace = match.groups()
            entry = registry / namespace / f"{hostname}.{subdomain}.json"
            if entry.is_file():
                return dict(json.loads(entry.read_text()))
    return None


def connect(host: str, entry: dict[str, str], attempts: int) -> socket.socket:
    for attempt in range(max(1, attempts)):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            client.connect("\0" + entry["socket"])
            return client
        except OSError:
            client.close()
            if attempt + 1 < attempts:
                time.sleep(1)
    fail(f"ssh: connect to host {host} port 22: Connection refused")
    raise AssertionError  # fail() exits


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.exit(SSH_FAILED)


def stdio_fds() -> list[int]:
    """The caller's stdin, stdout and stderr (/dev/null for a closed one)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def offered_key(key_dir: str) -> str:
    for name in PUBLIC_KEY_FILES:
        path = Path(key_dir) / name if key_dir else None
        if path and path.is_file():
            return path.read_text()
    return ""


def ssh(args: argparse.Namespace) -> int:
    options, host, command = parse_ssh(args.argv)
    if not command:
        fail("ssh stand-in: no remote command (no interactive shell here)")
    if re.fullmatch(r"[0-9.]+|[0-9a-f:]+", host):
        fail(f"ssh: {host}: every pod is 127.0.0.1 here; name the pod by its DNS name (hack/README.md)")
    entry = resolve(host, Path(args.registry), args.search)
    if entry is None:
        fail(f"ssh: Could not resolve hostname {host}: Name or service not known")
    assert entry is not None
    client = connect(host, entry, int(options.get("connectionattempts", "1") or 1))
    request = {"command": " ".join(command), "key": offered_key(args.key_dir), "from": args.pod}
    with client:
        socket.send_fds(client, [json.dumps(request).encode()], stdio_fds())
        reply = client.recv(MAX_MESSAGE)
    if not reply:
        fail(f"Connection to {host} closed by remote host.")
    answer = json.loads(reply)
    if "error" in answer:
        fail(f"{pwd.getpwuid(os.getuid()).pw_name}@{host}: {answer['error']}")
    return int(answer["status"])


def main(argv: list[str] | None = None) -> int:
    """`ssh_standin.py sshd|ssh [our options] -- [the program's own arguments]`."""
    argv = sys.argv[1:] if argv is None else argv
    ours, _, theirs = (argv[:argv.index("--")], None, argv[argv.index("--") + 1:]) if "--" in argv else (argv, None, [])
    parser = argparse.ArgumentParser(prog="ssh_standin", description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    server = modes.add_parser("sshd", help="a worker's sshd (its own arguments are ignored)")
    server.add_argument("--socket", required=True, help="abstract socket name")
    server.add_argument("--hostname", required=True)
    server.add_argument("--authorized-keys", default="")
    server.add_argument("--env", action="append", default=[], help="KEY=VALUE of the sessions' environment")
    client = modes.add_parser("ssh", help="ssh [options] [user@]host command (after --)")
    client.add_argument("--registry", required=True)
    client.add_argument("--pod", required=True, help="namespace/name of the calling pod")
    client.add_argument("--search", action="append", default=[], help="DNS search domain")
    client.add_argument("--key-dir", default="")
    args = parser.parse_args(ours)
    args.argv = theirs
    return serve(args) if args.mode == "sshd" else ssh(args)


if __name__ == "__main__":
    sys.exit(main())
