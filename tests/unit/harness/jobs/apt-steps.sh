#!/usr/bin/env bash
# Run by test_capabilities.py (APT_STEPS); see the comment there.
set -eu
cd "$1"
mkdir partial && chown nobody:nogroup partial && chmod 0700 partial
setpriv --reuid=nobody --regid=nogroup --clear-groups \
  sh -c 'echo deb > partial/pkg.deb; sleep 5 >/dev/null 2>&1 & echo $! > partial/pid'
cat partial/pkg.deb > /dev/null
touch -d @0 partial/pkg.deb
kill "$(cat partial/pid)"
echo APT-STEPS-DONE
