"""The shipped Prometheus rules, and the variants a deployment needs of them.

The rule files in ``rainierd/rules/`` are the one source.  From them this
module derives:

- test-sized copies, every ``for:`` replaced by one duration, so an
  end-to-end test or a demo sees alerts fire in seconds while the shipped
  files keep their production durations;
- copies whose ``runbook_url`` points at a user's own runbooks (a wiki, an
  internal fork of docs/runbooks.md) instead of the public repository's;
- copies with another per-job goodput objective (the constant
  ``rainier:job_goodput:objective`` the burn-rate alerts divide by);
- a prometheus-operator ``PrometheusRule`` carrying the same groups, which
  deploy/kubernetes/ ships and a test keeps free of drift.

Every transformation is textual on the rule files (or a parse of them for
the PrometheusRule), so a copy differs from its source in the replaced
values only.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any, Final

import yaml

from rainierd.errors import ConfigError

RULES_DIR: Final = Path(__file__).parent / "rules"
"""The shipped rule files (package data: an installed wheel has them too)."""

RUNBOOK_BASE: Final = "https://github.com/rainierd/rainierd/blob/main/docs/runbooks.md"
"""Where the shipped rules' ``runbook_url`` points: docs/runbooks.md of the
public repository, so a link works from Alertmanager, Slack or Grafana
without a checkout.  Each alert appends its section's anchor (``#…``)."""

PROMETHEUS_RULE_NAME: Final = "rainierd"
"""``metadata.name`` of the generated PrometheusRule."""

_FOR: Final = re.compile(r"^(\s*for:\s*)\S+(.*)$", re.MULTILINE)
_DURATION: Final = re.compile(r"^(\d+(ms|s|m|h))+$")
_OBJECTIVE: Final = re.compile(
    r"^(\s*- record: rainier:job_goodput:objective\n\s*expr: vector\()[0-9.]+(\))[ \t]*$", re.MULTILINE)
_RUNBOOK: Final = re.compile(r"^(\s*runbook_url:\s*)" + re.escape(RUNBOOK_BASE) + r"(#[\w-]+)[ \t]*$", re.MULTILINE)


def override_for(text: str, duration: str) -> str:
    """Return a rule file's text with every ``for:`` set to ``duration``.

    Raises ConfigError if ``duration`` is not a Prometheus duration.
    """
    if not _DURATION.match(duration):
        raise ConfigError(f"{duration!r} is not a Prometheus duration such as 5s or 1m30s")
    return _FOR.sub(lambda m: f"{m[1]}{duration}{m[2]}", text)


def rebase_runbooks(text: str, base: str) -> str:
    """Return a rule file's text with every shipped ``runbook_url`` moved to ``base``.

    ``base`` is the address of the runbooks document (``https://wiki.example/rainierd-runbooks``);
    each alert keeps its section anchor, so its link becomes ``base#section``.
    Raises ConfigError unless ``base`` is an absolute http(s) URL without a fragment.
    """
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or "#" in base:
        raise ConfigError(f"--runbook-base {base!r} must be an absolute http(s) URL without a #fragment")
    return _RUNBOOK.sub(lambda m: f"{m[1]}{base}{m[2]}", text)


def set_job_goodput_objective(text: str, objective: float) -> str:
    """Return a rule file's text with the per-job goodput objective set to ``objective``.

    A file without the objective's rule is returned unchanged.  Raises
    ConfigError unless 0 < ``objective`` < 1 (an objective of 1 leaves no
    budget to burn, and the burn rates would divide by zero).
    """
    if not 0.0 < objective < 1.0:
        raise ConfigError(f"--job-goodput-objective {objective!r} must lie strictly between 0 and 1, e.g. 0.99")
    return _OBJECTIVE.sub(lambda m: f"{m[1]}{objective!r}{m[2]}", text)


def _render(
    text: str, *, duration: str | None, runbook_base: str | None, job_goodput_objective: float | None = None,
) -> str:
    if duration is not None:
        text = override_for(text, duration)
    if runbook_base is not None:
        text = rebase_runbooks(text, runbook_base)
    if job_goodput_objective is not None:
        text = set_job_goodput_objective(text, job_goodput_objective)
    return text


def _check_objective_rule(files: list[Path], objective: float | None) -> None:
    """Refuse an objective that no rule would carry: rule files edited away
    from the shipped form would otherwise keep their own objective silently."""
    if objective is None:
        return
    found = sum(len(_OBJECTIVE.findall(path.read_text())) for path in files)
    if found != 1:
        raise ConfigError(
            f"--job-goodput-objective needs one rule `record: rainier:job_goodput:objective` "
            f"with `expr: vector(<ratio>)` in the rule files; found {found}")


def _rule_files(source: Path) -> list[Path]:
    files = sorted(source.glob("*.yml"))
    if not files:
        raise ConfigError(f"no rule files (*.yml) in {source}")
    return files


def write_overridden(
    source: Path, target: Path, duration: str | None, *, runbook_base: str | None = None,
    job_goodput_objective: float | None = None,
) -> list[Path]:
    """Write every ``*.yml`` of ``source`` to ``target``, ``for:`` set to ``duration`` (None: kept),
    runbook links moved to ``runbook_base`` and the per-job goodput objective set to
    ``job_goodput_objective`` (None: kept); return the new paths.

    Raises ConfigError for a bad duration, base or objective, or a ``source`` without rule files.
    """
    files = _rule_files(source)
    _check_objective_rule(files, job_goodput_objective)
    texts = [_render(path.read_text(), duration=duration, runbook_base=runbook_base,
                     job_goodput_objective=job_goodput_objective) for path in files]
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in zip(files, texts, strict=True):
        out = target / path.name
        out.write_text(text)
        written.append(out)
    return written


def write_rules(
    source: Path, target: Path, *, duration: str | None, runbook_base: str | None, kubernetes: bool,
    job_goodput_objective: float | None = None,
) -> list[Path]:
    """Write what `rainierd rules` writes into ``target``: copies of every rule file
    (:func:`write_overridden`), or with ``kubernetes`` one ``prometheusrule.yaml``
    (:func:`prometheus_rule`); return the paths written.

    Raises ConfigError as those do.
    """
    if not kubernetes:
        return write_overridden(source, target, duration, runbook_base=runbook_base,
                                job_goodput_objective=job_goodput_objective)
    text = prometheus_rule(source, duration=duration, runbook_base=runbook_base,
                           job_goodput_objective=job_goodput_objective)
    target.mkdir(parents=True, exist_ok=True)
    out = target / "prometheusrule.yaml"
    out.write_text(text)
    return [out]


def prometheus_rule(
    source: Path = RULES_DIR, *, duration: str | None = None, runbook_base: str | None = None,
    job_goodput_objective: float | None = None,
) -> str:
    """Return a prometheus-operator PrometheusRule (YAML) holding every group of ``source``'s rule files.

    The groups are the files' own, in file order, values untouched unless
    ``duration``, ``runbook_base`` or ``job_goodput_objective`` is given (as for :func:`write_overridden`).
    Raises ConfigError as :func:`write_overridden` does, or if two files
    define a group of the same name (Prometheus would refuse the pair too).
    """
    groups: list[Any] = []
    files = _rule_files(source)
    _check_objective_rule(files, job_goodput_objective)
    for path in files:
        loaded = yaml.safe_load(_render(path.read_text(), duration=duration, runbook_base=runbook_base,
                                        job_goodput_objective=job_goodput_objective))
        groups.extend(loaded["groups"])
    names = [group["name"] for group in groups]
    if len(names) != len(set(names)):
        raise ConfigError(f"rule group names repeat across {source}: {sorted(names)}")
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": PROMETHEUS_RULE_NAME,
            "labels": {"app.kubernetes.io/name": "rainierd", "app.kubernetes.io/component": "rules"},
        },
        "spec": {"groups": groups},
    }
    header = (
        "# Generated by `rainierd rules --kubernetes` from rainierd/rules/*.yml: do not edit.\n"
        "# tests/unit/deploy/test_deploy.py fails when this file and the rule files drift apart.\n"
    )
    return header + yaml.safe_dump(resource, sort_keys=False, width=1 << 16, allow_unicode=True)
