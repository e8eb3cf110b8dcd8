"""Prometheus metrics of a running proxy, served by ``prometheus-client``.

The metrics are read from the proxy's live :class:`~forethought.mcp.stats.ProxyStats` at scrape time (a
custom collector on a registry of its own), so they can never disagree with the summary printed at exit.
:func:`serve_metrics` serves them on ``127.0.0.1:PORT``; a proxy listening on HTTP mounts
:func:`metrics_app` at ``/metrics`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, make_asgi_app, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from forethought.mcp.stats import ProxyStats

PREFIX = "forethought_mcp_"
LOCALHOST = "127.0.0.1"


class ProxyCollector(Collector):
    """Turns the current stats into metric families."""

    def __init__(self, current: Callable[[], ProxyStats]) -> None:
        self._current = current

    def collect(self) -> Iterator[Metric]:
        s = self._current()
        calls = CounterMetricFamily(f"{PREFIX}calls", "tools/call requests of clients, by how they were answered",
                                    labels=["outcome"])
        calls.add_metric(["hit"], s.hits)
        calls.add_metric(["miss"], s.misses)
        calls.add_metric(["passthrough"], s.passthrough)
        yield calls
        yield CounterMetricFamily(f"{PREFIX}seconds_saved", "Upstream seconds clients did not wait for",
                                  value=s.saved_s)
        yield CounterMetricFamily(f"{PREFIX}speculative_upstream_calls",
                                  "tools/call requests the proxy sent on a guess", value=s.speculative_calls)
        yield GaugeMetricFamily(f"{PREFIX}extra_upstream_calls",
                                "Speculative requests that answered no client call", value=s.extra_upstream_calls)
        yield GaugeMetricFamily(f"{PREFIX}sessions", "Client sessions served", value=s.sessions)


def registry_for(current: Callable[[], ProxyStats]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ProxyCollector(current))
    return registry


def serve_metrics(current: Callable[[], ProxyStats], port: int) -> Callable[[], None]:
    """Serve ``/metrics`` on 127.0.0.1:``port`` in a thread; returns the function that stops it."""
    server, thread = start_http_server(port, addr=LOCALHOST, registry=registry_for(current))

    def stop() -> None:
        server.shutdown()
        thread.join()

    return stop


def metrics_app(current: Callable[[], ProxyStats]) -> Any:
    """An ASGI app serving the metrics (mounted at ``/metrics`` by the HTTP listener)."""
    return make_asgi_app(registry=registry_for(current))
