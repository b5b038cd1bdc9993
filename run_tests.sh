#!/usr/bin/env bash
# The test suite: install (if needed), then pytest (unit tests + a short run of every
# recipe stage on a small subset). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash install.sh
exec .venv/bin/python -m pytest tests "$@"
