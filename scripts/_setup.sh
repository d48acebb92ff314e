# Sourced by scripts/test, .ci/run and the other development scripts: makes .venv (scripts/_venv.sh) with
# rainierd and its test extras (pytest, Textual, the linters, mypy, the schema checkers: about 390 MB). Running
# rainierd alone needs none of them: scripts/run installs only what it runs on.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
install_rainierd test "the test tools"
