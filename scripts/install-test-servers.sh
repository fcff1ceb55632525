#!/usr/bin/env bash
# What the real-server tests need beyond the Python packages, installed when missing:
# - PostgreSQL's server programs, for the checkpointer tests (tests/savers.py starts a
#   private cluster with initdb/pg_ctl on a free loopback port). Debian's `postgresql`
#   package puts them in /usr/lib/postgresql/VERSION/bin.
# - A C++ compiler, for building llama.cpp (the `local` extra, installed by `make local`).
# - bubblewrap (`bwrap`), the sandbox the code runner prefers (loop_agents_checks.sandbox); the
#   sandbox tests of the bwrap isolation must run on CI (tests/test_sandbox.py).
# - Chromium, which draws the report pages headless in tests/test_html_browser.py (and makes
#   the documentation's screenshot, scripts/screenshot_eval_report.py).
# Installing needs root (apt-get); without it, the script says what to install.
# With arguments, only those of the packages above are checked: `make test-fast` asks for
# bubblewrap alone (the offline sandbox tests run in it; as root, the other isolations
# need an interpreter every user can read, which a virtual environment under /root is not).
set -euo pipefail

wanted=("$@")
if [ ${#wanted[@]} -eq 0 ]; then
    wanted=(postgresql g++ bubblewrap chromium)
fi
wants() {
    local name
    for name in "${wanted[@]}"; do
        [ "$name" = "$1" ] && return 0
    done
    return 1
}

missing=()
if wants postgresql && ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    missing+=(postgresql)
fi
if wants g++ && ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
    missing+=(g++)
fi
if wants bubblewrap && ! command -v bwrap >/dev/null 2>&1; then
    missing+=(bubblewrap)
fi
if wants chromium && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "The real-server tests need: ${missing[*]}. Install them (e.g. sudo apt-get install -y ${missing[*]})" >&2
    echo "or run only the offline tests with: make test-fast" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
