"""Specification of ``rainierd completion``: the script is generated from the
command line's parser, so it holds every command and flag ``--help`` shows
(tests/integration/test_cli.py runs it in a real bash)."""

from __future__ import annotations

import pytest

from rainierd import cli, completion
from rainierd.settings import flag_name, role_settings


@pytest.fixture(scope="module")
def found() -> dict[str, completion.Command]:
    return {c.path: c for c in completion.commands(cli._parser())}


class TestWhatItCompletes:
    def test_every_command_path(self, found: dict[str, completion.Command]) -> None:
        """Each subcommand, at every depth, is a command path with its own flags."""
        assert {"", "run", "top", "completion", "jobs", "jobs slurm", "jobs kubernetes", "jobs static", "bridge",
                "bridge neuron-monitor", "inventory", "inventory from-neuron-ls", "inventory nodes"} <= set(found)
        assert "bench" not in found
        assert found["jobs"].subcommands == ("slurm", "kubernetes", "static")

    def test_a_roles_flags_are_its_settings(self, found: dict[str, completion.Command]) -> None:
        """`run` completes every settings flag it reads, generated from the settings model, and --top."""
        assert {flag_name(name) for name in role_settings("run")} | {"--top"} <= set(found["run"].flags)

    def test_what_a_flag_takes(self, found: dict[str, completion.Command]) -> None:
        """A flag's value completes as its choices, a file name (a Path setting), or nothing the shell can guess;
        a switch takes none."""
        values = found["run"].values
        assert (values["--log-format"], values["--scenario"], values["--topology"], "--top" in values) == (
            "auto json console", completion.FILE, completion.ANY, False)
        assert found["completion"].subcommands == ("bash", "zsh")


class TestTheScript:
    def test_bash_registers_its_function(self) -> None:
        """The bash script defines the completion function and registers it for `rainierd`."""
        script = completion.script(cli._parser(), "bash")
        assert script.rstrip().endswith("complete -o default -F _rainierd rainierd")
        assert '"run|--log-format") echo "auto json console" ;;' in script

    def test_zsh_runs_the_same_function_through_bashcompinit(self) -> None:
        """The zsh script is the bash one behind zsh's bash-completion layer."""
        bash = completion.script(cli._parser(), "bash").splitlines()
        zsh = completion.script(cli._parser(), "zsh").splitlines()
        assert zsh[2] == "autoload -U +X bashcompinit && bashcompinit"
        assert zsh[3:] == bash[2:]
