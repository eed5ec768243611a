"""The status page, ``GET /`` of the node's HTTP endpoint: one HTML document with
its CSS and JavaScript inline and nothing else to load.

The page holds no data: its script fetches ``/status.json`` (:mod:`.status`) every
:data:`REFRESH_MS` and rebuilds each section from it with DOM calls, every string
going in as a text node or an attribute value (``textContent``,
``setAttribute``), never as markup, so a topic, group or node name cannot inject
HTML. The Content-Security-Policy allows only this script and style (by hash) and
requests to this origin: an injected ``<img onerror=...>`` would not run even if
it got in. Charts are inline SVG drawn by the script.

Elements carry stable ids and ``data-`` attributes for tests and scripts:
``#members tr[data-member=ID][data-state=alive|suspect|dead|left]`` (and
``data-maintenance``, ``data-disk-full``, ``data-answered``);
``#partitions tr[data-partition="topic/N"][data-under-replicated=true|false]``
(``data-leader``, ``data-high-watermark``); ``#rates [data-rates=ID]`` (``data-produce-max``,
``data-fetch-max``, records/s); ``#groups tr[data-group=NAME]`` (``data-lag``);
``#fenced tr[data-fenced]``, ``#damaged tr[data-damaged]``;
``#leadership tr[data-change="topic/N"]`` (``data-leader``, ``data-term``);
``[data-more=SECTION]`` rows count what a capped list left out; ``#updated``
says when the last refresh was (``data-refreshes``, ``data-error``).
"""

from __future__ import annotations

import base64
import hashlib

REFRESH_MS = 2_000

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #1d2430; background: #f4f6f9; }
header { background: #1d2430; color: #fff; padding: 8px 16px; display: flex; gap: 24px;
  align-items: baseline; }
header h1 { font-size: 16px; margin: 0; }
#updated[data-error] { color: #ff8080; }
main { padding: 8px 16px; display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
section { background: #fff; border: 1px solid #d8dde5; border-radius: 4px; padding: 8px; }
section.wide { grid-column: 1 / 3; }
h2 { font-size: 14px; margin: 0 0 6px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #eef0f3; }
th { font-weight: 600; color: #5a6372; }
.state-alive { color: #137333; } .state-suspect { color: #b06000; }
.state-dead { color: #c5221f; font-weight: 600; } .state-left { color: #5a6372; }
tr[data-under-replicated="true"] td { background: #fde8e7; }
.flag { display: inline-block; padding: 0 4px; border-radius: 3px; background: #fde8e7;
  color: #c5221f; margin-right: 4px; }
.muted { color: #8a93a3; }
#rates { display: flex; flex-wrap: wrap; gap: 12px; }
#rates figure { margin: 0; }
#rates figcaption { font-size: 12px; }
.produce { stroke: #1a73e8; } .fetch { stroke: #e8710a; }
.legend-produce { color: #1a73e8; } .legend-fetch { color: #e8710a; }
"""

_SCRIPT = """
"use strict";
const REFRESH_MS = @REFRESH_MS@;
const SVG = "http://www.w3.org/2000/svg";
let refreshes = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

function table(id, headings, rows, more, what) {
  const body = el("tbody", {});
  for (const row of rows) body.append(row);
  if (more > 0) {
    body.append(el("tr", {"data-more": id},
      el("td", {colspan: headings.length, class: "muted"}, more + " more " + what)));
  }
  if (rows.length === 0 && !(more > 0)) {
    body.append(el("tr", {"data-empty": id},
      el("td", {colspan: headings.length, class: "muted"}, "none")));
  }
  const head = el("tr", {}, ...headings.map((h) => el("th", {}, h)));
  document.getElementById(id).replaceChildren(el("table", {}, el("thead", {}, head), body));
}

function shown(value) { return value === null || value === undefined ? "unknown" : String(value); }

function members(status) {
  const rows = status.members.map((m) => {
    const flags = el("td", {});
    if (m.maintenance) flags.append(el("span", {class: "flag"}, "maintenance"));
    if (m.disk_full) flags.append(el("span", {class: "flag"}, "disk full"));
    if (!m.answered) flags.append(el("span", {class: "flag"}, "no status: " + m.error));
    return el("tr", {
        "data-member": m.node_id, "data-state": m.state,
        "data-maintenance": m.maintenance, "data-disk-full": shown(m.disk_full),
        "data-answered": m.answered},
      el("td", {}, m.node_id + (m.serving ? " (this page)" : "")),
      el("td", {class: "state-" + m.state}, m.state),
      el("td", {}, m.grpc_address), el("td", {}, m.zone), el("td", {}, m.weight), flags);
  });
  table("members", ["node", "state", "gRPC", "zone", "weight", ""], rows, 0, "");
}

function partitions(status) {
  const rows = status.partitions.map((p) => el("tr", {
      "data-partition": p.id, "data-under-replicated": p.under_replicated,
      "data-leader": p.leader === null ? "" : p.leader,
      "data-high-watermark": p.high_watermark === null ? "" : p.high_watermark},
    el("td", {}, p.topic), el("td", {}, p.partition),
    el("td", {}, p.leader === null ? "none" : p.leader),
    el("td", {}, p.replicas.join(", ")), el("td", {}, p.in_sync.join(", ")),
    el("td", {}, p.high_watermark === null ? "?" : p.high_watermark),
    el("td", {}, p.under_replicated ? "under-replicated" : "")));
  table("partitions", ["topic", "partition", "leader", "replicas", "in sync",
    "high watermark", ""], rows, status.partitions_more, "partitions");
  document.getElementById("partition-summary").textContent =
    status.partitions_total + " partitions, " + status.under_replicated +
    " under-replicated, " + status.leaderless + " leaderless";
}

function chart(points, horizonS) {
  const width = 280, height = 70;
  const top = Math.max(1, ...points.map((p) => Math.max(p.produce, p.fetch)));
  const image = svg("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height,
    role: "img"});
  image.append(svg("rect", {x: 0, y: 0, width: width, height: height, fill: "#fafbfc",
    stroke: "#d8dde5"}));
  for (const kind of ["produce", "fetch"]) {
    const coordinates = points.map((p) =>
      (width - (p.ago_s / horizonS) * width).toFixed(1) + "," +
      (height - 2 - (p[kind] / top) * (height - 4)).toFixed(1));
    image.append(svg("polyline", {class: kind, fill: "none", "stroke-width": 1.5,
      points: coordinates.join(" ")}));
  }
  return [image, top];
}

function rates(status) {
  const figures = status.rates.map((r) => {
    const horizonS = Math.max(60, ...r.points.map((p) => p.ago_s));
    const produceMax = Math.max(0, ...r.points.map((p) => p.produce));
    const fetchMax = Math.max(0, ...r.points.map((p) => p.fetch));
    const last = r.points.length ? r.points[r.points.length - 1] : {produce: 0, fetch: 0};
    const [image, top] = chart(r.points, horizonS);
    const caption = el("figcaption", {}, r.node_id + ": ",
      el("span", {class: "legend-produce"}, "produce " + last.produce + "/s"), " ",
      el("span", {class: "legend-fetch"}, "fetch " + last.fetch + "/s"),
      el("span", {class: "muted"}, " (last " + Math.round(horizonS / 60) + " min, top " +
        top + " records/s)"));
    if (r.error) caption.append(el("div", {class: "muted"}, "no rates: " + r.error));
    return el("figure", {"data-rates": r.node_id, "data-produce-max": produceMax,
      "data-fetch-max": fetchMax, "data-points": r.points.length}, caption, image);
  });
  document.getElementById("rates").replaceChildren(...figures);
}

function groups(status) {
  const rows = status.groups.map((g) => el("tr", {"data-group": g.group,
      "data-lag": g.lag_records, "data-coordinator": g.coordinator},
    el("td", {}, g.group), el("td", {}, g.state), el("td", {}, g.members),
    el("td", {}, g.coordinator), el("td", {}, g.partitions),
    el("td", {}, g.lag_records + (g.lag_unknown ? " (+" + g.lag_unknown + " unknown)" : "")),
    el("td", {}, g.lag_max_records)));
  table("groups", ["group", "state", "members", "coordinator", "partitions",
    "lag (records)", "max lag"], rows, status.groups_more, "groups");
}

function problems(status, kind) {
  const rows = status[kind].map((f) => el("tr",
      {["data-" + kind]: f.node_id + "/" + f.topic + "/" + f.partition},
    el("td", {}, f.node_id), el("td", {}, f.topic + "/" + f.partition),
    el("td", {}, f.reason), el("td", {}, f.for_s + " s")));
  table(kind, ["node", "partition", "reason", "for"], rows, status[kind + "_more"], kind);
}

function leadership(status) {
  const rows = status.leadership_changes.map((c) => el("tr", {"data-change": c.id,
      "data-leader": c.leader, "data-term": c.term},
    el("td", {}, c.ago_s + " s ago"), el("td", {}, c.id), el("td", {}, c.leader),
    el("td", {}, c.term), el("td", {class: "muted"}, c.seen_by.join(", "))));
  table("leadership", ["when", "partition", "new leader", "term", "seen by"], rows, 0, "");
}

function render(status) {
  document.getElementById("cluster").textContent =
    "cluster " + status.cluster_id + ", served by " + status.node_id;
  members(status);
  partitions(status);
  rates(status);
  groups(status);
  problems(status, "fenced");
  problems(status, "damaged");
  leadership(status);
}

async function refresh() {
  const updated = document.getElementById("updated");
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    if (!response.ok) throw new Error(response.status + " " + (await response.text()));
    render(await response.json());
    refreshes += 1;
    updated.textContent = "updated " + new Date().toLocaleTimeString();
    updated.removeAttribute("data-error");
  } catch (error) {
    updated.textContent = "refresh failed: " + error.message;
    updated.setAttribute("data-error", "true");
  }
  updated.setAttribute("data-refreshes", refreshes);
  setTimeout(refresh, REFRESH_MS);
}

refresh();
""".replace("@REFRESH_MS@", str(REFRESH_MS))

_BODY = """<body>
<header><h1>Laminar</h1><span id="cluster"></span><span id="updated">loading</span></header>
<main>
<section><h2>Members</h2><div id="members"></div></section>
<section><h2>Produce and fetch (records/s)</h2><div id="rates"></div></section>
<section class="wide"><h2>Partitions <span id="partition-summary" class="muted"></span></h2>
<div id="partitions"></div></section>
<section><h2>Consumer groups</h2><div id="groups"></div></section>
<section><h2>Recent leadership changes</h2><div id="leadership"></div></section>
<section><h2>Fenced replicas</h2><div id="fenced"></div></section>
<section><h2>Damaged replicas</h2><div id="damaged"></div></section>
</main>
"""


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


PAGE = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    "<title>Laminar status</title>"
    f"<style>{_STYLE}</style></head>\n{_BODY}<script>{_SCRIPT}</script>\n</body></html>\n"
).encode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_hash(_SCRIPT)}; style-src {_hash(_STYLE)}; "
    "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""Only the page's own script and style run, and it talks only to its origin."""
