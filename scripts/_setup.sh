# Sourced by scripts/run and scripts/test: makes .venv with rainierd and its
# test extras, on a fresh Debian 12 with only Python 3.11 (as root, it installs
# python3-venv with apt-get when Debian's Python lacks it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv
        apt_install python3-venv
        "$PYTHON" -m venv .venv
    fi
fi

# Reinstall only when pyproject.toml changed since the last install.
stamp=.venv/.rainierd-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
    echo "$want" > "$stamp"
fi
