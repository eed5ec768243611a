"""What a node tells an operator over HTTP: Prometheus metrics, health and readiness.

``--metrics HOST:PORT`` (TOML ``[metrics]``, :class:`~.config.MetricsConfig`) starts
:class:`~.http.HttpServer` on a thread of its own with a route table; the node adds
``/metrics``, ``/healthz`` and ``/ready`` (:mod:`.endpoint`), and other pages add
their own routes. A scrape takes one consistent snapshot of the node's state on its
event loop (:mod:`.snapshot`) and builds the metric families from it off the loop
(:mod:`.collector`). The only things counted on the request path are the request
statistics of :mod:`.histogram` (one latency observation per gRPC call).

Only :mod:`.histogram` and :mod:`.config` are imported by the rest of the node; the
other modules (which import ``prometheus_client``) only when metrics are on.
"""
