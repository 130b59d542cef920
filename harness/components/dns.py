"""Cluster DNS helpers: CoreDNS's own metrics, its Corefile, and how a pod's resolver expands names.

Pure logic (Corefile edits, Prometheus text parsing, resolv.conf search expansion) is kept apart
from the few functions that talk to the cluster, so it can be unit-tested.

Sources for the behaviour modelled here:

- Kubernetes, "DNS for Services and Pods" (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/):
  a pod with the default ``dnsPolicy: ClusterFirst`` gets ``search <ns>.svc.<domain> svc.<domain> <domain>``
  plus the node's search domains, and ``options ndots:5``.
- resolv.conf(5) (https://man7.org/linux/man-pages/man5/resolv.conf.5.html): a name with fewer than
  ``ndots`` dots is tried with each search domain appended before it is tried as given; a name with
  at least ``ndots`` dots is tried as given first; a name ending in a dot is never expanded.
- CoreDNS plugins ``prometheus`` (https://coredns.io/plugins/metrics/: ``coredns_dns_requests_total``,
  ``coredns_plugin_enabled``), ``forward`` (https://coredns.io/plugins/forward/), ``reload``
  (https://coredns.io/plugins/reload/) and ``template`` (https://coredns.io/plugins/template/).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from kubernetes import client
from kubernetes.stream import stream
from prometheus_client.parser import text_string_to_metric_families

from harness.core.waiting import wait_until_or_raise
from harness.kube.providers import Cluster

COREDNS_NAMESPACE = "kube-system"
COREDNS_DEPLOYMENT = "coredns"
COREDNS_CONFIGMAP = "coredns"
COREDNS_CONTAINER = "coredns"
COREDNS_SELECTOR = "k8s-app=kube-dns"
KUBE_DNS_SERVICE = "kube-dns"
METRICS_PORT = 9153

# Every block the drill adds to the Corefile starts with this comment, so a reader of the live
# ConfigMap sees where it came from (the revert restores the saved original, not by this marker).
DRILL_BLOCK_MARK = "# kdrill dns-saturation drill zone: answered here, never forwarded; kdrill reverts it"


# --- Prometheus text -------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricSample:
    """One sample of CoreDNS's ``/metrics``: ``name`` as exposed (``..._total``, ``..._count``)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def parse_metrics(text: str) -> list[MetricSample]:
    """Parse Prometheus text exposition format. Raises ValueError on malformed text."""
    return [MetricSample(s.name, tuple(sorted(s.labels.items())), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def metric_sum(samples: Iterable[MetricSample], name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 when none)."""
    return sum(s.value for s in samples if s.name == name and all(s.label(k) == v for k, v in labels.items()))


def requests_by(samples: Iterable[MetricSample], *keys: str) -> dict[tuple[str | None, ...], float]:
    """``coredns_dns_requests_total`` summed by the given labels (e.g. ``"zone", "type"``)."""
    out: dict[tuple[str | None, ...], float] = {}
    for s in samples:
        if s.name == "coredns_dns_requests_total":
            key = tuple(s.label(k) for k in keys)
            out[key] = out.get(key, 0.0) + s.value
    return out


def forward_series(samples: Iterable[MetricSample]) -> dict[str, float]:
    """Every counter of the ``forward`` plugin, by series: requests sent upstream
    (``coredns_proxy_request_duration_seconds_count{proxy_name="forward"}`` since CoreDNS 1.11,
    ``coredns_forward_requests_total`` before), upstream connections (``coredns_proxy_conn_cache_*``)
    and rejects. Any increase means something was sent (or tried) upstream."""
    out: dict[str, float] = {}
    for s in samples:
        counter = s.name.endswith("_total") or s.name.endswith("_count")
        forward = s.name.startswith("coredns_forward_") or (
            s.name.startswith("coredns_proxy_") and s.label("proxy_name") == "forward")
        if counter and forward:
            key = s.name + "{" + ",".join(f"{k}={v}" for k, v in s.labels) + "}"
            out[key] = out.get(key, 0.0) + s.value
    return out


def counter_increase(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Series whose value grew from ``before`` to ``after`` (a series absent before counts from 0;
    a counter that went down was reset by a restart and counts from 0 too)."""
    grown = {}
    for key, value in after.items():
        old = before.get(key, 0.0)
        delta = value - old if value >= old else value
        if delta > 0:
            grown[key] = delta
    return grown


def served_zones(samples: Iterable[MetricSample], plugin: str) -> set[str]:
    """Zones (``"example.com."``) where ``plugin`` is enabled in the configuration CoreDNS is
    running, from ``coredns_plugin_enabled``: what the server serves now, whatever the file says."""
    return {s.label("zone") or "" for s in samples
            if s.name == "coredns_plugin_enabled" and s.label("name") == plugin and s.value == 1}


# --- Corefile ---------------------------------------------------------------------------------

def fqdn(name: str) -> str:
    """``name`` lowercased with exactly one trailing dot (``"."`` for the root)."""
    name = name.strip().lower().rstrip(".")
    return name + "." if name else "."


def _tokens(corefile: str) -> list[tuple[int, str]]:
    """(line number, token) pairs: words, quoted strings (kept with quotes), ``{`` and ``}``;
    comments (``#`` to end of line, outside quotes) are dropped."""
    out = []
    for lineno, line in enumerate(corefile.splitlines(), 1):
        for match in re.finditer(r'"(?:[^"\\]|\\.)*"|[{}]|#.*|[^\s{}"#]+', line):
            token = match.group(0)
            if token.startswith("#"):
                break
            out.append((lineno, token))
    return out


@dataclass
class Directive:
    """One plugin line: ``name args...`` and, when it has a block, the block's directives."""

    name: str
    args: list[str]
    block: list["Directive"] = field(default_factory=list)


@dataclass
class ServerBlock:
    keys: list[str]
    directives: list[Directive]

    @property
    def zones(self) -> list[str]:
        """The block's zones as FQDNs (keys without scheme and port)."""
        zones = []
        for key in self.keys:
            key = re.sub(r"^[a-z]+://", "", key)
            key = re.sub(r":\d+$", "", key)
            zones.append(fqdn(key))
        return zones


def parse_corefile(corefile: str) -> list[ServerBlock]:
    """Server blocks with their directives (one level of nested blocks, as plugins use).
    Raises ValueError on unbalanced braces."""
    tokens = _tokens(corefile)
    blocks: list[ServerBlock] = []
    i = 0

    def parse_body(i: int) -> tuple[list[Directive], int]:
        directives: list[Directive] = []
        while i < len(tokens):
            lineno, tok = tokens[i]
            if tok == "}":
                return directives, i + 1
            if tok == "{":
                raise ValueError(f"Corefile line {lineno}: '{{' without a directive")
            words = [tok]
            i += 1
            while i < len(tokens) and tokens[i][0] == lineno and tokens[i][1] not in "{}":
                words.append(tokens[i][1])
                i += 1
            directive = Directive(words[0], words[1:])
            if i < len(tokens) and tokens[i][1] == "{" and tokens[i][0] == lineno:
                directive.block, i = parse_body(i + 1)
            directives.append(directive)
        raise ValueError("Corefile: unbalanced braces (a block is not closed)")

    while i < len(tokens):
        lineno = tokens[i][0]
        keys = []
        while i < len(tokens) and tokens[i][1] != "{":
            if tokens[i][1] == "}":
                raise ValueError(f"Corefile line {tokens[i][0]}: '}}' without a block")
            keys.append(tokens[i][1])
            i += 1
        if i >= len(tokens):
            raise ValueError(f"Corefile line {lineno}: server block {keys} has no '{{'")
        directives, i = parse_body(i + 1)
        blocks.append(ServerBlock(keys=keys, directives=directives))
    return blocks


def kubernetes_authoritative_zones(corefile: str) -> list[str]:
    """Zones the ``kubernetes`` plugin answers itself: its zones (or the server block's) minus
    those it lets ``fallthrough`` to the next plugin (all of them for a bare ``fallthrough``).
    An NXDOMAIN for a name in these zones comes from CoreDNS, never from upstream."""
    zones: list[str] = []
    for block in parse_corefile(corefile):
        for d in block.directives:
            if d.name != "kubernetes":
                continue
            own = [fqdn(z) for z in d.args] or block.zones
            through: set[str] | None = set()
            for sub in d.block:
                if sub.name == "fallthrough":
                    through = {fqdn(z) for z in sub.args} if sub.args else None
            zones += [] if through is None else [z for z in own if z not in through]
    return zones


def drill_zone_block(zones: list[str], answers: dict[str, str], ttl: int = 60) -> str:
    """A server block making CoreDNS authoritative for ``zones`` (FQDNs; the first is the drill
    zone): ``answers`` (name -> IPv4) are answered with an A record, any other name or type in
    ``zones`` gets NXDOMAIN (NODATA for the other types of a name in ``answers``), with an SOA so
    resolvers may cache the negative answer. Nothing reaches ``forward``: the block has none."""
    zones = [fqdn(z) for z in zones]
    if not zones:
        raise ValueError("drill_zone_block needs at least one zone")
    for name in answers:
        if not any(fqdn(name) == z or fqdn(name).endswith("." + z) for z in zones):
            raise ValueError(f"answer {name} is outside the drill zones {zones}")
    soa = (f'authority "{{{{ .Zone }}}} {ttl} IN SOA ns.{{{{ .Zone }}}} hostmaster.{{{{ .Zone }}}} '
           f'1 {ttl} {ttl} {ttl} {ttl}"')
    zone_args = " ".join(zones)
    lines = [DRILL_BLOCK_MARK, " ".join(f"{z}:53" for z in zones) + " {", "    errors", "    prometheus :9153"]
    for name, address in sorted(answers.items()):
        pattern = "^" + re.escape(fqdn(name)).replace(r"\.", "[.]") + "$"
        lines += [f"    template IN A {zone_args} {{", f'        match "{pattern}"',
                  f'        answer "{{{{ .Name }}}} {ttl} IN A {address}"', "        fallthrough", "    }",
                  f"    template ANY ANY {zone_args} {{", f'        match "{pattern}"', f"        {soa}",
                  "        fallthrough", "    }"]
    lines += [f"    template ANY ANY {zone_args} {{", "        rcode NXDOMAIN", f"        {soa}", "    }", "}"]
    return "\n".join(lines) + "\n"


def with_drill_zone(corefile: str, block: str) -> str:
    """``corefile`` with ``block`` appended. Raises ValueError when a zone of ``block`` already
    has a server block (the drill would change how that zone is served, not add one)."""
    existing = {z for b in parse_corefile(corefile) for z in b.zones}
    added = [z for b in parse_corefile(block) for z in b.zones]
    clash = sorted(existing.intersection(added))
    if clash:
        raise ValueError(f"the Corefile already serves {', '.join(clash)}; the drill zone must be new")
    return corefile.rstrip("\n") + "\n" + block


# --- resolv.conf and search expansion --------------------------------------------------------

@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[str, ...]
    search: tuple[str, ...]
    ndots: int
    options: tuple[str, ...]


def parse_resolv_conf(text: str) -> ResolvConf:
    """resolv.conf(5): ``nameserver``, ``search`` (last one wins; ``domain`` is the one-entry
    form), ``options`` (``ndots:n``, default 1, capped at 15)."""
    nameservers: list[str] = []
    search: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if not words:
            continue
        if words[0] == "nameserver" and len(words) > 1:
            nameservers.append(words[1])
        elif words[0] in ("search", "domain"):
            search = words[1:] if words[0] == "search" else words[1:2]
        elif words[0] == "options":
            options += words[1:]
    ndots = 1
    for opt in options:
        if opt.startswith("ndots:"):
            ndots = min(15, max(0, int(opt.split(":", 1)[1])))
    return ResolvConf(tuple(nameservers), tuple(search), ndots, tuple(options))


def search_candidates(name: str, search: Iterable[str], ndots: int) -> list[str]:
    """The names (FQDNs, in order) a stub resolver asks for ``name`` until one is answered, per
    resolv.conf(5): none expanded for a name ending in '.'; the name as given first when it has at
    least ``ndots`` dots; otherwise each search domain first and the name as given last. Every
    candidate is asked when the earlier ones are NXDOMAIN, so this is also the list of queries for
    a name that is answered only as given."""
    if name.endswith("."):
        return [fqdn(name)]
    expanded = [fqdn(f"{name}.{domain.rstrip('.')}") for domain in search]
    as_given = fqdn(name)
    return [as_given] + expanded if name.count(".") >= ndots else expanded + [as_given]


def zone_of(name: str, zones: Iterable[str]) -> str | None:
    """The longest of ``zones`` that contains ``name`` (both as FQDNs), or None."""
    name = fqdn(name)
    best = None
    for zone in zones:
        zone = fqdn(zone)
        if zone == "." or name == zone or name.endswith("." + zone):
            if best is None or len(zone) > len(best):
                best = zone
    return best


def outside_zones(names: Iterable[str], zones: Iterable[str]) -> list[str]:
    """The names no zone in ``zones`` contains: queries CoreDNS would hand to ``forward``."""
    zones = [fqdn(z) for z in zones if fqdn(z) != "."]
    return [n for n in names if zone_of(n, zones) is None]


# --- the cluster -----------------------------------------------------------------------------

def coredns_pods(cluster: Cluster, ready_only: bool = True) -> list[client.V1Pod]:
    """kube-dns pods not being deleted (and Ready, when ``ready_only``)."""
    pods = cluster.core.list_namespaced_pod(COREDNS_NAMESPACE, label_selector=COREDNS_SELECTOR,
                                            _request_timeout=10).items
    out = []
    for pod in pods:
        if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
            continue
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        if ready or not ready_only:
            out.append(pod)
    return out


def scrape(cluster: Cluster, pod: str, timeout_seconds: float = 5.0) -> list[MetricSample]:
    """CoreDNS's ``/metrics`` of one pod, through the API server's pod proxy (the host never
    addresses pod IPs). Raises ApiException / ValueError."""
    text = cluster.core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod}:{METRICS_PORT}", COREDNS_NAMESPACE, "metrics", _request_timeout=timeout_seconds)
    return parse_metrics(text)


def scrape_all(cluster: Cluster, timeout_seconds: float = 5.0) -> dict[str, list[MetricSample]]:
    """pod name -> metrics, for every Ready kube-dns pod."""
    return {p.metadata.name: scrape(cluster, p.metadata.name, timeout_seconds) for p in coredns_pods(cluster)}


def total_requests(scraped: dict[str, list[MetricSample]]) -> float:
    return sum(metric_sum(samples, "coredns_dns_requests_total") for samples in scraped.values())


def all_forward_series(scraped: dict[str, list[MetricSample]]) -> dict[str, float]:
    """``forward_series`` of every pod, keyed ``<pod>/<series>``."""
    return {f"{pod}/{key}": value for pod, samples in scraped.items() for key, value in forward_series(samples).items()}


# Longer than the loop plugin's 2 s between a (re)start or a reload and its self-query, which is
# forwarded (coredns.io/plugins/loop).
STEADY_SECONDS = 3.0


def steady_scrape(cluster: Cluster, requests: bool = True, timeout_seconds: float = 60) -> dict[str, list[MetricSample]]:
    """:func:`scrape_all` once the forward plugin's counters (and, with ``requests``,
    ``coredns_dns_requests_total``) have held still for ``STEADY_SECONDS``: a reload's or a start's
    own loop-detection query is behind us and, with ``requests``, nothing else is querying, so the
    next change is the caller's. Raises ConditionTimeout after ``timeout_seconds``."""

    readings: list[tuple[float, object, dict]] = []

    def still() -> bool:
        scraped = scrape_all(cluster)
        key = (sorted(scraped), all_forward_series(scraped), total_requests(scraped) if requests else None)
        now = time.monotonic()
        if readings and readings[-1][1] != key:
            readings.clear()
        readings.append((now, key, scraped))
        return now - readings[0][0] >= STEADY_SECONDS

    wait_until_or_raise(still, timeout_seconds, interval_seconds=1.0, description="CoreDNS counters steady")
    return readings[-1][2]


def cluster_domain(zones: Iterable[str]) -> str | None:
    """The cluster domain among the ``kubernetes`` plugin's zones (``"cluster.local."``): the first
    that is not a reverse zone, or None."""
    return next((z for z in zones if not z.endswith(("in-addr.arpa.", "ip6.arpa."))), None)


def kube_dns_cluster_ip(cluster: Cluster) -> str:
    return cluster.core.read_namespaced_service(KUBE_DNS_SERVICE, COREDNS_NAMESPACE, _request_timeout=10).spec.cluster_ip


def read_corefile(cluster: Cluster) -> str:
    cm = cluster.core.read_namespaced_config_map(COREDNS_CONFIGMAP, COREDNS_NAMESPACE, _request_timeout=10)
    return (cm.data or {})["Corefile"]


def pod_exec(cluster: Cluster, namespace: str, pod: str, command: list[str], timeout_seconds: float = 30) -> str:
    """Run ``command`` in the pod's first container; returns its stdout and stderr.

    Uses its own API client: ``kubernetes.stream`` swaps the client's request function while it runs.
    """
    core = client.CoreV1Api(cluster.new_api())
    return stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=command,
                  stderr=True, stdin=False, stdout=True, tty=False, _request_timeout=timeout_seconds)


# --- dnsperf output -----------------------------------------------------------------------------

_DNSPERF_INTERVAL = re.compile(r"^(\d{9,}\.\d+): ([\d.]+)$", re.M)


def dnsperf_report(log: str) -> dict[str, Any]:
    """From dnsperf's output: ``statistics`` (the final section's ``key: value`` lines, e.g.
    ``"Queries sent"``), and ``intervals``, the ``(epoch seconds, queries per second)`` lines
    ``-S`` prints while it sends; the last one marks (within the interval) when sending ended."""
    intervals = [(float(t), float(q)) for t, q in _DNSPERF_INTERVAL.findall(log)]
    stats: dict[str, str] = {}
    start = log.find("Statistics:")
    if start >= 0:
        for line in log[start:].splitlines()[1:]:
            key, sep, value = line.strip().partition(":")
            if sep and value.strip():
                stats[key.strip()] = value.strip()
    return {"statistics": stats, "intervals": intervals}
