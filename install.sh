#!/usr/bin/env bash
# Set up .venv/ in the repository root with everything espnet_dynres, its recipe and
# its tests need (Python 3.11). Safe to re-run: does nothing when already up to date.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
command -v "${PYTHON}" >/dev/null 2>&1 || PYTHON=python3
"${PYTHON}" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { echo "install.sh: needs Python 3.11 (the lock, requirements-lock.txt); set PYTHON=/path/to/python3.11" >&2; exit 1; }

stamp=.venv/.espnet_dynres_installed
want=$(cat setup.py install.sh requirements-lock.txt | sha256sum | cut -d ' ' -f 1)
if [ -f "${stamp}" ] && [ "$(cat "${stamp}")" = "${want}" ]; then
    echo "install.sh: .venv is up to date"
    exit 0
fi
[ -x .venv/bin/python ] || "${PYTHON}" -m venv .venv
# pip >= 25 refuses ESPnet's dependency ci_sdr (a direct-URL extra); 24.2 installs it.
.venv/bin/python -m pip install -q "pip==24.2"
# torchaudio needs exactly its torch: install the pair first (a CUDA build, ~7 GB).
.venv/bin/python -m pip install -q -c requirements-lock.txt torch torchaudio
.venv/bin/python -m pip install -q -c requirements-lock.txt -e ".[test]"
.venv/bin/python -c "import torch, torchaudio, espnet; print('install.sh: torch', torch.__version__, 'torchaudio', torchaudio.__version__, 'espnet', espnet.__version__)"
echo "${want}" > "${stamp}"
