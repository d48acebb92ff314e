"""The command line as a process sees it (the rest is tests/unit/test_cli.py):
``--version`` asks the real git, a closed pipe ends a utility quietly, a
bounded simulation that published nothing fails, and the completion script
completes in a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.procs import free_port
from harness.timing import within
from rainierd import __version__, cli, completion

ROOT = Path(__file__).parents[2]
RAINIERD = [sys.executable, "-m", "rainierd"]


def test_version_names_the_checkouts_commit() -> None:
    """`rainierd --version` in this checkout: the package version and git's commit (``+modified`` when tracked
    files differ), on stdout, exit 0."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    done = subprocess.run([*RAINIERD, "--version"], capture_output=True, text=True, timeout=within(30), check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout in (f"rainierd {__version__} (commit {head})\n", f"rainierd {__version__} (commit {head}"
                                                                         "+modified)\n")


def test_a_closed_pipe_ends_a_utility_quietly() -> None:
    """`rainierd schema` into a pipe whose reader is gone (``| head -c0``): nothing on stderr, and 141, as a shell
    tool killed by SIGPIPE ends (before issue 37: a BrokenPipeError traceback)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([*RAINIERD, "schema"], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=within(30), check=False)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_bounded_simulation_that_published_nothing_fails() -> None:
    """`rainierd simulate --ticks 2` with no broker at its URL: exit 1, its last line saying nothing was published
    (before issue 37: exit 0)."""
    url = f"mqtt://127.0.0.1:{free_port()}"
    done = subprocess.run([*RAINIERD, "simulate", "--mqtt-url", url, "--ticks", "2", "--tick", "0.1",
                           "--log-format", "console"], capture_output=True, text=True, timeout=within(60),
                          check=False)
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert "rainierd failed" in last
    assert f"simulate published nothing in its 2 ticks: no broker at {url} took a frame" in last


def complete(*words: str) -> list[str]:
    """Return what bash completes for ``rainierd WORDS`` (the last word the one being typed), with the script
    ``rainierd completion bash`` prints (made here in process: bash is the process under test)."""
    script = completion.script(cli._parser(), "bash")
    line = " ".join(f"'{w}'" for w in ("rainierd", *words))
    probe = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _rainierd; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, timeout=within(30))
    return done.stdout.split()


@pytest.mark.parametrize(("words", "expected"), [
    (("jo",), ["jobs"]),
    (("jobs", "s"), ["slurm", "static"]),
    (("run", "--log-f"), ["--log-format"]),
    (("run", "--log-format", ""), ["auto", "json", "console"]),
    (("run", "--log-format", "=", "js"), ["json"]),
    (("run", "--log-format", "="), ["auto", "json", "console"]),
    (("--config", "x.toml", "run", "--topology", "demo", "--to"), ["--top", "--topology"]),
    (("completion", ""), ["bash", "zsh", "-h", "--help"]),
])
def test_bash_completes_commands_flags_and_choices(words: tuple[str, ...], expected: list[str]) -> None:
    """The generated script completes subcommands at any depth, a command's flags, and a flag's choices, past
    flags that take values."""
    assert complete(*words) == expected


# zsh: compinit, the script (which loads bashcompinit), then what compgen -F gives for a command line. zsh's compadd,
# not the script, keeps only the candidates that start with the word being typed, so the whole list is returned.
ZSH_PROBE = """autoload -U compinit && compinit -u
source {script}
words=({words}); CURRENT=$#words
COMP_WORDS=("${{words[@]}}"); COMP_CWORD=$((CURRENT - 1))
compgen -F _rainierd -- "${{words[-1]}}"
"""


@pytest.mark.parametrize(("words", "expected"), [
    (("jobs", "s"), {"slurm", "kubernetes", "static", "--help"}),
    (("--config", "x.toml", "run", "--log-format", ""), {"auto", "json", "console"}),
])
def test_zsh_runs_the_same_completion(words: tuple[str, ...], expected: set[str], tmp_path: Path) -> None:
    """`rainierd completion zsh`, sourced after compinit, offers the same words as bash's at each point."""
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.fail("zsh is missing: apt-get install zsh (scripts/test does)")
    script = tmp_path / "rainierd.zsh"
    script.write_text(completion.script(cli._parser(), "zsh"))
    probe = ZSH_PROBE.format(script=script, words=" ".join(f"'{w}'" for w in ("rainierd", *words)))
    done = subprocess.run([zsh, "-f", "-c", probe], capture_output=True, text=True, timeout=within(30), check=False,
                          env={**os.environ, "HOME": str(tmp_path)})
    offered = set(done.stdout.split())
    assert expected <= offered, (done.stdout, done.stderr)
    if words[-2:] == ("--log-format", ""):
        assert offered == expected
