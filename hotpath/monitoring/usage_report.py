"""`hotpath usage`: what each tenant used, read back from the counters the models and the gateway keep.

The counters (docs/operations.md, "Usage per tenant"):

  hotpath_gateway_tenant_requests_total{tenant, door}   the gateway's status port: requests served
  hotpath_usage_<kind>_total{tenant, model}              Triton's metrics port (hotpath.runtime.usage):
      input_tokens, output_tokens (as vLLM counted them), embedding_tokens (as the tokenizer counted them),
      images (decoded), documents_written (upserted or deleted in a store)

With `--prometheus URL --window 1h` the usage of the last hour comes from Prometheus, summed over every
replica it scrapes: per series its last value within the hour less its value an hour ago (a series born
within the hour counts whole; one that ended within it, a model reloaded or a replica gone, counts up to its
last scrape; after a reset, what was counted since), then summed by tenant. Exact to the scrape: no
extrapolation, unlike increase(). Without Prometheus, the given metrics endpoints are scraped now: totals
since each process started.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from hotpath.errors import HotpathError
from hotpath.runtime.usage import KINDS, PREFIX

REQUESTS = "hotpath_gateway_tenant_requests_total"
COLUMNS = ("requests", *KINDS)   # requests, input_tokens, output_tokens, embedding_tokens, images, documents_written
METRICS = {"requests": REQUESTS, **{kind: f"{PREFIX}{kind}_total" for kind in KINDS}}
DEFAULT_METRICS = ("http://127.0.0.1:8002/metrics",)   # tritonserver's metrics port (hotpath serve)
WINDOW = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")   # a Prometheus duration
TIMEOUT_S = 10.0


class UsageError(HotpathError):
    """An endpoint or Prometheus could not be read, or the window is not a duration."""


@dataclass
class Usage:
    """Per tenant, per column: the units used."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""

    def add(self, tenant: str, column: str, value: float) -> None:
        row = self.rows.setdefault(tenant, dict.fromkeys(COLUMNS, 0.0))
        row[column] += value

    def as_json(self) -> dict:
        return {"source": self.source,
                "tenants": {t: {c: _number(v) for c, v in row.items()} for t, row in sorted(self.rows.items())}}

    def table(self) -> str:
        header = ("tenant", *COLUMNS)
        lines = [header] + [(t, *(f"{_number(row[c])}" for c in COLUMNS)) for t, row in sorted(self.rows.items())]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        out = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths)))
               for line in lines]
        if not self.rows:
            out.append("(no usage counted)")
        return "\n".join([f"usage: {self.source}", *out])


def _number(value: float) -> int | float:
    return int(round(value)) if abs(value - round(value)) < 1e-6 else round(value, 3)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None


def parse_exposition(text: str, usage: Usage, tenant: str | None = None) -> None:
    """Adds the usage counters of one Prometheus text exposition to `usage`."""
    from prometheus_client.parser import text_string_to_metric_families  # the openai-api extra's

    names = {metric: column for column, metric in METRICS.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            column = names.get(sample.name)
            who = sample.labels.get("tenant")
            if column is None or who is None or (tenant and who != tenant):
                continue
            usage.add(who, column, float(sample.value))


def scrape(urls: tuple[str, ...] | list[str], tenant: str | None = None) -> Usage:
    """Totals since start, from the metrics endpoints `urls` (Triton's metrics port, the gateway's status port)."""
    usage = Usage(source="totals since start from " + ", ".join(urls))
    for url in urls:
        parse_exposition(_get(url), usage, tenant)
    return usage


def window_query(metric: str, window: str, tenant: str | None = None) -> str:
    """PromQL: the counter's rise over the last `window`, per tenant (see the module's docstring)."""
    selector = f'{metric}{{tenant="{tenant}"}}' if tenant else metric
    last = f"last_over_time({selector}[{window}])"
    return f"sum by (tenant) ((({last} - {selector} offset {window}) >= 0) or {last})"


def from_prometheus(url: str, window: str, tenant: str | None = None) -> Usage:
    """The last `window` of usage per tenant from the Prometheus at `url`."""
    if not WINDOW.match(window):
        raise UsageError(f"--window {window!r} is not a Prometheus duration (e.g. 15m, 1h, 7d)")
    if tenant is not None and not re.fullmatch(r"[a-z0-9_-]{1,64}", tenant):
        raise UsageError(f"--tenant {tenant!r} is not a tenant name")
    usage = Usage(source=f"last {window} from Prometheus at {url}")
    for column, metric in METRICS.items():
        query = urllib.parse.urlencode({"query": window_query(metric, window, tenant)})
        answer = json.loads(_get(f"{url.rstrip('/')}/api/v1/query?{query}"))
        if answer.get("status") != "success":
            raise UsageError(f"Prometheus refused the query for {metric}: {answer.get('error')}")
        for series in answer["data"]["result"]:
            who = series["metric"].get("tenant")
            if who:
                usage.add(who, column, float(series["value"][1]))
    return usage


def add_arguments(p) -> None:
    p.add_argument("--prometheus", metavar="URL", help="Prometheus's URL: usage over --window, every replica summed")
    p.add_argument("--window", default="1h", help="with --prometheus: how far back (a Prometheus duration; 1h)")
    p.add_argument("--metrics", metavar="URL", action="append",
                   help="without --prometheus: a metrics endpoint to scrape (repeatable): tritonserver's metrics "
                        "port and the gateway's status port; default " + DEFAULT_METRICS[0])
    p.add_argument("--tenant", help="one tenant only")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")


def cmd_usage(args) -> int:
    if args.prometheus:
        usage = from_prometheus(args.prometheus, args.window, args.tenant)
    else:
        usage = scrape(tuple(args.metrics or DEFAULT_METRICS), args.tenant)
    print(json.dumps(usage.as_json(), indent=2) if args.json else usage.table())
    return 0
