#!/usr/bin/env bash
# Run by test_first_contact_real.py (APT_SCRIPT); see the comment there.
set -eux
python3 - <<'PY'
import io, tarfile, time
now = int(time.time())

def tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        for name, data, uid, mode in members:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            info.mode, info.mtime = mode, now
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()

control = b"Package: kt2t-caps\nVersion: 1.0\nArchitecture: all\nMaintainer: kt2t\nDescription: caps\n"
data = tar([("./opt", None, 0, 0o755), ("./opt/kt2t", None, 0, 0o755),
            ("./opt/kt2t/file", b"hello\n", 1000, 0o640)])
members = [(b"debian-binary", b"2.0\n"), (b"control.tar.gz", tar([("./control", control, 0, 0o644)])),
           (b"data.tar.gz", data)]
with open("/tmp/kt2t-caps.deb", "wb") as out:
    out.write(b"!<arch>\n")
    for name, body in members:
        out.write(b"%-16s%-12d%-6d%-6d%-8s%-10d`\n" % (name, now, 0, 0, b"100644", len(body)))
        out.write(body + (b"\n" if len(body) % 2 else b""))
PY
apt-get install -y /tmp/kt2t-caps.deb
test "$(stat -c %u /opt/kt2t/file)" = 1000
echo APT-INSTALL-DONE
