"""docs/settings.md, generated from the settings model (``rainierd.settings``):
every setting with its flag, environment variable, default, the commands
that read it and its meaning, so the reference cannot drift from what the
command line accepts (a test compares the checked-in file with this output).

Regenerate it with ``python -m rainierd.settings_doc > docs/settings.md``.
"""

from __future__ import annotations

import re
import sys
from typing import Final

from pydantic.fields import FieldInfo

from rainierd.settings import CONFIG_ENV, ROLE_PARTS, Part, Settings, Use, flag_name

# The sections, one per part of rainierd that reads settings, in the order an operator meets them.
_SECTIONS: Final[tuple[tuple[Part, str, str], ...]] = (
    ("mqtt", "MQTT", "How every role that speaks MQTT reaches its broker."),
    ("fleet", "The fleet", "The fleet's shape: every role that names nodes, chips, links or ports reads it."),
    ("simulator", "Simulator", "`rainierd simulate`, and the simulator inside `rainierd run`."),
    ("monitor", "Monitor", "`rainierd monitor`, and the monitor inside `rainierd run`: ingest, detection, jobs, "
                           "advisories and the webhook."),
    ("aggregator", "Aggregator", "`rainierd aggregate` ([aggregation.md](aggregation.md))."),
    ("http", "HTTP", "Where a role listens for scrapes, probes and the read API, and its TLS and basic auth."),
    ("server", "HTTP server limits", "What the listening side allows before it sheds connections "
                                     "([exporter-security.md](exporter-security.md))."),
    ("bridge", "Bridge", "`rainierd bridge neuron-monitor` ([bridge.md](bridge.md))."),
    ("healthcheck", "Healthcheck", "`rainierd healthcheck`'s own credentials (it reads the HTTP settings too)."),
    ("log", "Logs", "Every long-running command."),
)

_HEAD: Final = f"""# Settings

*Generated from the settings model (rainierd/settings.py) by `python -m rainierd.settings_doc > docs/settings.md`;
a test fails when this file is not what the model says.*

Every setting can be given as a flag, an environment variable `RAINIERD_<NAME>`
or a key in a TOML file (`--config FILE`, or `{CONFIG_ENV}`); flags beat the
environment, which beats the file, which beats the default. Keys in the file
are the names below, at the top level. A bad value, or a key in the file that
is no setting, stops rainierd at start with exit code 2 and one line naming
it. `rainierd COMMAND --help` lists exactly the settings that command reads.

Two environment variables are not settings, and are the only others rainierd
reads: `{CONFIG_ENV}` names the settings file (so it is read before the file
is), and `NODE_NAME` is `rainierd node-check`'s default `--node`
([actions.md](actions.md#node-problem-detector-rainierd-node-check)).
"""


def _use(field: FieldInfo) -> Use:
    return next(m for m in field.metadata if isinstance(m, Use))


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _commands(use: Use) -> str:
    """Return the commands that read a setting of ``use``'s parts, as the ``--help`` of each lists it."""
    return ", ".join(f"`{role}`" for role, parts in ROLE_PARTS.items() if parts & set(use.parts))


def _cell(text: str) -> str:
    """Return ``text`` fit for a table cell: docs/X.md made a link (this file is in docs/), pipes escaped."""
    text = re.sub(r"\bdocs/([\w-]+\.md)", r"[\1](\1)", text)
    return text.replace("|", "\\|")


def markdown() -> str:
    """Return docs/settings.md as the settings model says it."""
    out = [_HEAD]
    fields = Settings.model_fields
    for part, title, intro in _SECTIONS:
        names = [name for name, field in fields.items() if _use(field).parts[0] == part]
        if not names:
            continue
        out += [f"## {title}\n", f"{intro}\n", "| setting | flag | variable | default | read by | meaning |",
                "|---|---|---|---|---|---|"]
        for name in names:
            field, use = fields[name], _use(fields[name])
            flag = "none (environment or file only)" if use.secret else f"`{flag_name(name)}`"
            out.append(f"| `{name}` | {flag} | `RAINIERD_{name.upper()}` | {_default(field)} | {_commands(use)} "
                       f"| {_cell(field.description or '')} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    """Print docs/settings.md."""
    sys.stdout.write(markdown())



if __name__ == "__main__":
    main()
