#!/bin/bash
# TestNvidiaDriverCapabilities (upstream's nvidia-driver-capabilities-check.yaml): with
# NVIDIA_DRIVER_CAPABILITIES=all, ModernGL opens an EGL context: a missing driver library fails it.
set -e
apt-get update
apt-get install -y python3 python3-pip libgl1-mesa-glx libegl1-mesa-dev libgles2-mesa-dev mesa-utils xvfb
pip3 install moderngl
sleep 60
cat <<'EOF' > moderngl-script.py
import moderngl
moderngl.create_standalone_context(backend='egl')
EOF
python3 moderngl-script.py
