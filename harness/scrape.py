"""Scrapes of a /metrics endpoint as the tests and benchmarks read them:
fetched over HTTP (or HTTPS), parsed with ``prometheus_client.parser`` rather
than split by hand, and keyed by the series as the exposition writes it
(``name{label="value",...}``), so a test can index the sample it means.
Histogram helpers turn two scrapes into Prometheus's interpolated quantiles.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "current_values",
    "fetch",
    "histogram_buckets",
    "histogram_delta",
    "histogram_quantile",
    "sample_values",
    "scrape",
    "series_key",
]

Buckets = list[tuple[float, float]]


def fetch(url: str, *, timeout_s: float = 5.0, context: ssl.SSLContext | None = None) -> str:
    """Return the body of GET ``url`` (an https URL verified against ``context``).

    Raises OSError (urllib's URLError and HTTPError among them) when nothing
    answers or the answer is an HTTP error.
    """
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
        return str(response.read().decode())


def scrape(port: int, path: str = "/metrics", *, timeout_s: float = 5.0) -> str:
    """Return the body of GET http://127.0.0.1:port/path; raises OSError as ``fetch`` does."""
    return fetch(f"http://127.0.0.1:{port}{path}", timeout_s=timeout_s)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def series_key(name: str, labels: Mapping[str, str]) -> str:
    """Return the series as the text exposition writes it: ``name`` or ``name{a="x",b="y"}``."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def sample_values(text: str, *, only: Sequence[str] = ()) -> dict[str, float]:
    """Return {series: value} of a Prometheus text exposition, each series keyed by ``series_key``.

    With ``only``, just the samples whose name starts with one of those
    prefixes: the parser is pure Python (about 20 µs a sample), and a
    benchmark polling a ``rainier`` scrape of 150,000 series for a few
    counters must not spend seconds of the CPU it measures on the rest.
    """
    if only:
        prefixes = tuple(only)
        text = "".join(f"{line}\n" for line in text.splitlines() if line.startswith(prefixes))
    return {series_key(sample.name, sample.labels): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def current_values(port: int, *, timeout_s: float = 5.0, only: Sequence[str] = ()) -> dict[str, float]:
    """Return the samples of a scrape of 127.0.0.1:port/metrics (those ``only`` names, as ``sample_values``),
    or {} while nothing answers."""
    try:
        return sample_values(scrape(port, timeout_s=timeout_s), only=only)
    except OSError:
        return {}


def histogram_buckets(values: Mapping[str, float], name: str) -> Buckets:
    """Return the cumulative (upper bound, count) buckets of histogram ``name`` (unlabelled) in a scrape."""
    prefix = f"{name}_bucket{{"
    text = "".join(f"{series} {count!r}\n" for series, count in values.items() if series.startswith(prefix))
    return sorted((float(sample.labels["le"]), sample.value)
                  for family in text_string_to_metric_families(text) for sample in family.samples)


def histogram_delta(after: Mapping[str, float], before: Mapping[str, float], name: str) -> Buckets:
    """Return the buckets of histogram ``name`` counted between two scrapes."""
    return [(bound, a - b) for (bound, a), (_, b)
            in zip(histogram_buckets(after, name), histogram_buckets(before, name), strict=True)]


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Return the ``q`` quantile of cumulative (upper bound, count) buckets, as Prometheus interpolates it
    (None when the buckets count nothing)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1.0)
        lower_bound, lower_count = bound, count
    return None
