# Sourced by scripts/_setup.sh (the tests' set-up) and scripts/run (running only): makes .venv, on a fresh
# Debian 12 with only Python 3.11 (as root, it installs python3-venv with apt-get when Debian's Python lacks it),
# and installs rainierd into it with the extras the caller names (install_rainierd). Each step says what it does
# on stderr, prefixed with the calling script's path, so a first run is never silent while pip works.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each message names the script that sourced this one, as the checkout knows it (scripts/run, .ci/run).
say() { echo "${0#"$PWD"/}: $*" >&2; }

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "rainierd needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing Debian packages: $* (run: sudo apt-get install $*)" >&2
        exit 1
    fi
    say "installing Debian packages: $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if [ ! -x .venv/bin/python ]; then
    say "making .venv ($("$PYTHON" --version 2>&1))"
    if ! "$PYTHON" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv
        apt_install python3-venv
        "$PYTHON" -m venv .venv
    fi
fi

# install_rainierd EXTRAS [WHAT]: install rainierd (editable) with EXTRAS (e.g. "test", "top"), unless that was
# done since pyproject.toml or the compiled passes' source last changed; a venv holding more extras than asked
# (the tests' holds every one a run needs) is taken as it is. WHAT says, in the message, what the extras are for.
install_rainierd() {
    local extras=$1 what=${2:-$1} want stamp started
    # pip compiles rainierd's passes (rainierd/native/kernels.c) as it installs: a change to them installs again.
    want=$(cat pyproject.toml rainierd/native/*.c | sha256sum | cut -d' ' -f1)
    for stamp in .venv/.rainierd-installed-"$extras" .venv/.rainierd-installed-test; do
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
            return 0
        fi
    done
    # The compiler pip runs is the one this Python was built with (Debian's: x86_64-linux-gnu-gcc, from gcc),
    # with libc's headers (libc6-dev); no Python headers are needed.
    local cc
    cc=$(.venv/bin/python -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')
    if ! command -v "$cc" >/dev/null || [ ! -e /usr/include/stdint.h ]; then
        apt_install gcc libc6-dev
    fi
    say "installing rainierd and ${what} into .venv with pip (about a minute the first time; quicker after)"
    started=$SECONDS
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
    echo "$want" > .venv/.rainierd-installed-"$extras"
    say "installed in $(( SECONDS - started )) s ($(du -sm .venv | cut -f1) MB in .venv)"
}
