// kbroker ui: fills each page from its JSON twin (/api/ + the page's path) and fetches it again at each sampling
// round the server announces on /api/events (server-sent events): tables and charts change in place, no reload.
// Plain DOM, no framework; charts are uPlot (served beside this file). Text from the cluster only ever goes into
// textContent, never into HTML.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;
  const name = body.dataset.name;
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  const charts = {};  // id -> uPlot, kept across updates (window.kbrokerCharts: the browser test reads them)
  window.kbrokerCharts = charts;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#7f7f7f", "#bcbd22"];

  // -- small helpers -----------------------------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "cls") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const dash = "-";
  function num(v) { return v === null || v === undefined || v < 0 ? dash : String(v); }
  function bytes(v) {
    if (v === null || v === undefined || v < 0) return dash;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
  }
  function rate(v) { return v === null || v === undefined ? dash : v.toFixed(1); }
  function seconds(v) { return v === null || v === undefined ? dash : duration(v); }
  function duration(s) {
    if (s < 60) return s.toFixed(0) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    if (s < 86400) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }
  function age(ms, now) { return ms === null || ms === undefined ? dash : duration(Math.max(0, now - ms) / 1000) + " ago"; }
  function clock(ms) { return new Date(ms).toLocaleTimeString([], {hour12: false}); }
  function badge(status) { return el("span", {cls: "status s-" + status, text: status}); }
  function link(href, text) { return el("a", {href: href, text: text}); }
  function groupHref(g, storage) { return "/groups/" + encodeURIComponent(g) + "?storage=" + storage; }
  function topicHref(t) { return "/topics/" + encodeURIComponent(t); }

  // A table: columns are [key, header, cell(row) -> text or node, class(row)?]; rows carry data-key for the tests.
  function table(id, columns, rows, key) {
    const head = el("tr", {}, columns.map(([col, title]) => el("th", {"data-col": col, text: title})));
    const lines = rows.map((row) => el("tr", {"data-key": key(row)}, columns.map(([col, , cell, cls]) => {
      const value = cell(row);
      return el("td", {"data-col": col, cls: cls ? cls(row) : null}, value);
    })));
    if (!rows.length) lines.push(el("tr", {}, el("td", {colspan: columns.length, cls: "empty", text: "none"})));
    return el("table", {id: id}, el("thead", {}, head), el("tbody", {}, lines));
  }

  function sparkline(points) {
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 100 20");
    svg.setAttribute("preserveAspectRatio", "none");
    if (points.length > 1) {
      const max = Math.max(...points, 1);
      const line = document.createElementNS(svgNS, "polyline");
      line.setAttribute("points", points.map((v, i) =>
        (i * 100 / (points.length - 1)).toFixed(1) + "," + (19 - v * 18 / max).toFixed(1)).join(" "));
      svg.append(line);
    }
    return svg;
  }

  // -- charts ------------------------------------------------------------------------------------------------------

  function chartBlock(id, title, data, unit) {
    return {id: id, title: title, chart: data, unit: unit};
  }

  function drawChart(section, block) {
    const data = block.chart;
    const holder = section.querySelector(".chart") || section.appendChild(el("div", {cls: "chart"}));
    const note = section.querySelector(".note") || section.appendChild(el("p", {cls: "note"}));
    note.textContent = data.x.length ? "" : "No samples in this span yet.";
    const existing = charts[block.id];
    const same = existing && existing._names === data.names.join("\u0000");
    const columns = [data.x, ...data.y];
    if (same) { existing._span.from = data.from; existing._span.to = data.to; existing.setData(columns); return; }
    if (existing) { existing.destroy(); delete charts[block.id]; }
    const span = {from: data.from, to: data.to};
    const opts = {
      width: Math.max(300, main.clientWidth - 40), height: 220,
      scales: {x: {time: true, range: () => [span.from, span.to]}},  // the span's, even before the history fills it
      axes: [{}, {label: block.unit, size: 70}],
      series: [{}, ...data.names.map((n, i) => ({label: n, stroke: COLORS[i % COLORS.length], width: 1.5,
                                                  spanGaps: true}))],
    };
    const chart = new uPlot(opts, columns, holder);
    chart._span = span;
    chart._names = data.names.join("\u0000");
    charts[block.id] = chart;
  }

  // -- pages: each returns blocks ({id, title, node} or a chart block) from its JSON ------------------------------

  function overview(d) {
    const now = d.taken_ms;
    const counts = el("dl", {cls: "counts", id: "health"},
      el("dt", {text: "brokers up"}), el("dd", {"data-col": "brokers_up", text: d.brokers_up}),
      el("dt", {text: "brokers down"}), el("dd", {"data-col": "brokers_down", cls: d.brokers_down ? "bad" : null,
                                                  text: d.brokers_down}),
      el("dt", {text: "controller"}), el("dd", {"data-col": "controller", cls: d.controller < 0 ? "bad" : null,
                                                text: d.controller < 0 ? "none" : d.controller}),
      el("dt", {text: "partitions"}), el("dd", {"data-col": "partitions", text: d.partitions}),
      el("dt", {text: "offline"}), el("dd", {"data-col": "offline", cls: d.offline.length ? "bad" : null,
                                             text: d.offline.length}),
      el("dt", {text: "under-replicated"}), el("dd", {"data-col": "under_replicated",
                                                      cls: d.under_replicated.length ? "warn" : null,
                                                      text: d.under_replicated.length}),
      el("dt", {text: "under min ISR"}), el("dd", {"data-col": "under_min_isr", cls: d.under_min_isr.length ? "bad" : null,
                                                   text: d.under_min_isr.length}));
    const statuses = el("dl", {cls: "counts", id: "group-statuses"}, Object.entries(d.groups_by_status).map(
      ([status, n]) => [el("dt", {}, badge(status)), el("dd", {"data-col": status, text: n})]));
    const problems = [...d.offline.map((p) => ({...p, problem: "offline"})),
                      ...d.under_replicated.filter((p) => !p.offline).map((p) => ({...p, problem: "under-replicated"})),
                      ...d.under_min_isr.map((p) => ({...p, problem: "under min ISR"}))];
    return [
      {id: "cluster", title: "Cluster", node: counts},
      {id: "brokers", title: "Brokers", node: brokerTable(d.brokers)},
      {id: "problems", title: "Partitions needing attention", node: table("problem-table", [
        ["topic", "topic", (p) => link(topicHref(p.topic), p.topic)], ["partition", "partition", (p) => p.partition],
        ["problem", "problem", (p) => p.problem, () => "bad"], ["leader", "leader", (p) => num(p.leader)],
        ["replicas", "replicas", (p) => p.replicas.join(",")], ["isr", "ISR", (p) => p.isr.join(",")],
      ], problems, (p) => p.topic + "/" + p.partition + "/" + p.problem)},
      {id: "statuses", title: "Consumer groups by status", node: statuses},
      chartBlock("bytes", "Throughput, bytes per second", d.throughput_bytes, "bytes/s"),
      chartBlock("messages", "Throughput, messages per second", d.throughput_messages, "messages/s"),
    ].map((b) => ({...b, now: now}));
  }

  function brokerTable(brokers) {
    return table("broker-table", [
      ["id", "broker", (b) => b.id], ["address", "address", (b) => b.host + ":" + b.port],
      ["rack", "rack", (b) => b.rack || dash],
      ["up", "state", (b) => b.up ? "up" : "down", (b) => b.up ? "ok" : "bad"],
      ["controller", "controller", (b) => b.controller ? "yes" : ""],
    ], brokers, (b) => String(b.id));
  }

  function groups(d) {
    const now = d.taken_ms;
    return [{id: "groups", title: "Consumer groups", node: table("group-table", [
      ["name", "group", (g) => link(groupHref(g.name, g.storage), g.name)], ["storage", "storage", (g) => g.storage],
      ["state", "state", (g) => g.state], ["status", "status", (g) => badge(g.status)],
      ["partitions", "partitions", (g) => g.partitions], ["total_lag", "total lag", (g) => num(g.total_lag)],
      ["lag_seconds", "lag", (g) => seconds(g.lag_seconds)],
      ["last_commit", "last commit", (g) => age(g.last_commit_ms, now)],
      ["sparkline", "lag, last samples", (g) => sparkline(g.sparkline)],
    ], d.groups, (g) => g.storage + "/" + g.name)}];
  }

  function group(d) {
    const now = d.taken_ms;
    const g = d.group;
    const query = new URLSearchParams(location.search);
    const controls = el("div", {cls: "controls"},
      ["1h", "24h", "7d"].map((span) => el("button", {cls: span === d.chart.span ? "on" : null, "data-span": span,
                                                       text: span, onclick: () => { query.set("span", span); go(); }})),
      el("label", {}, el("input", {type: "checkbox", id: "per-partition", checked: d.chart.per_partition,
                                   onchange: (e) => { query.set("per_partition", e.target.checked ? "1" : "0"); go(); }}),
         " per partition"));
    function go() { history.replaceState(null, "", "?" + query.toString()); refresh(); }
    const summary = el("dl", {cls: "counts", id: "group-summary"},
      el("dt", {text: "storage"}), el("dd", {"data-col": "storage", text: g.storage}),
      el("dt", {text: "state"}), el("dd", {"data-col": "state", text: g.state}),
      el("dt", {text: "status"}), el("dd", {"data-col": "status"}, badge(g.status)),
      el("dt", {text: "total lag"}), el("dd", {"data-col": "total_lag", text: num(g.total_lag)}),
      el("dt", {text: "lag"}), el("dd", {"data-col": "lag_seconds", text: seconds(g.lag_seconds)}),
      el("dt", {text: "last commit"}), el("dd", {"data-col": "last_commit", text: age(g.last_commit_ms, now)}));
    return [
      {id: "summary", title: g.name, node: summary},
      {id: "controls", title: "Lag over time", node: controls},
      chartBlock("lag", "", d.chart, "messages"),
      {id: "partitions", title: "Partitions", node: table("partition-table", [
        ["topic", "topic", (p) => link(topicHref(p.topic), p.topic)], ["partition", "partition", (p) => p.partition],
        ["committed", "committed", (p) => num(p.committed)], ["log_end", "log end", (p) => num(p.log_end)],
        ["lag", "lag", (p) => num(p.lag)], ["lag_seconds", "lag (time)", (p) => seconds(p.lag_seconds)],
        ["owner", "owner", (p) => p.owner || dash], ["last_commit", "last commit", (p) => age(p.last_commit_ms, now)],
        ["status", "status", (p) => badge(p.status)],
      ], d.partitions, (p) => p.topic + "/" + p.partition)},
      {id: "members", title: "Members", node: table("member-table", [
        ["member_id", "member", (m) => m.member_id], ["client_id", "client", (m) => m.client_id],
        ["host", "host", (m) => m.host],
        ["assignment", "partitions", (m) => m.assignment.map(([t, p]) => t + "-" + p).join(" ")],
      ], d.members, (m) => m.member_id)},
    ];
  }

  function topics(d) {
    return [{id: "topics", title: "Topics", node: table("topic-table", [
      ["name", "topic", (t) => link(topicHref(t.name), t.name)], ["internal", "internal", (t) => t.internal ? "yes" : ""],
      ["partitions", "partitions", (t) => t.partitions], ["replication_factor", "replicas", (t) => t.replication_factor],
      ["offline", "offline", (t) => t.offline, (t) => t.offline ? "bad" : null],
      ["under_replicated", "under-replicated", (t) => t.under_replicated, (t) => t.under_replicated ? "warn" : null],
      ["non_preferred_leaders", "non-preferred leaders", (t) => t.non_preferred_leaders,
       (t) => t.non_preferred_leaders ? "warn" : null],
      ["size", "size", (t) => bytes(t.size_bytes)], ["messages_per_second", "messages/s", (t) => rate(t.messages_per_second)],
    ], d.topics, (t) => t.name)}];
  }

  function topic(d) {
    return [{id: "partitions", title: d.name + " (min.insync.replicas " + d.min_insync_replicas + ", " +
             rate(d.messages_per_second) + " messages/s)", node: table("partition-table", [
      ["partition", "partition", (p) => p.partition],
      ["leader", "leader", (p) => p.offline ? "offline" : p.leader,
       (p) => p.offline ? "bad" : (p.preferred_leader ? null : "warn")],
      ["replicas", "replicas", (p) => p.replicas.join(",")],
      ["isr", "ISR", (p) => p.isr.join(","), (p) => p.under_min_isr ? "bad" : (p.under_replicated ? "warn" : null)],
      ["marks", "marks", (p) => [p.offline ? "offline" : "", p.under_replicated ? "under-replicated" : "",
                            p.under_min_isr ? "under min ISR" : "",
                            !p.offline && !p.preferred_leader ? "non-preferred leader" : ""].filter(Boolean).join(", ")],
      ["log_start", "log start", (p) => num(p.log_start)], ["log_end", "log end", (p) => num(p.log_end)],
      ["size", "size", (p) => bytes(p.size_bytes)],
    ], d.partitions, (p) => String(p.partition))}];
  }

  function brokers(d) {
    const dirs = d.log_dirs;
    return [
      {id: "brokers", title: "Brokers", node: brokerTable(d.brokers)},
      {id: "dirs", title: "Log dirs", node: table("dir-table", [
        ["broker", "broker", (l) => l.broker], ["path", "path", (l) => l.path],
        ["state", "state", (l) => l.offline ? "offline (" + l.error + ")" : "online", (l) => l.offline ? "bad" : "ok"],
        ["size", "size", (l) => bytes(l.size_bytes)], ["free", "free", (l) => bytes(l.free_bytes)],
        ["total", "total", (l) => bytes(l.total_bytes)], ["partitions", "partitions", (l) => l.partitions.length],
      ], dirs, (l) => l.broker + ":" + l.path)},
      {id: "sizes", title: "Partition sizes", node: el("div", {}, dirs.map((l) => el("details", {},
        el("summary", {text: "broker " + l.broker + " · " + l.path + " · " + l.partitions.length + " partitions"}),
        table(null, [["topic", "topic", (p) => link(topicHref(p.topic), p.topic)],
                     ["partition", "partition", (p) => p.partition], ["size", "size", (p) => bytes(p.size_bytes)]],
              l.partitions, (p) => p.topic + "/" + p.partition))))},
    ];
  }

  const RENDER = {overview: overview, groups: groups, group: group, topics: topics, topic: topic, brokers: brokers};

  // -- fetching and updating ---------------------------------------------------------------------------------------

  function apiPath() {
    const path = page === "overview" ? "/api/" : "/api" + location.pathname;
    return path + (page === "group" ? location.search : "");
  }

  function show(blocks, d) {
    const wanted = new Set(blocks.map((b) => "block-" + b.id));
    for (const old of main.querySelectorAll("section")) if (!wanted.has(old.id)) old.remove();
    main.querySelector("h1").textContent = document.title.replace(/^kbroker · /, "");
    let banner = document.getElementById("banner");
    const problems = [...(d.errors || []), ...(d.sample_error ? ["last sample failed: " + d.sample_error] : [])];
    if (problems.length) {
      if (!banner) banner = main.insertBefore(el("div", {id: "banner"}), main.children[1]);
      banner.replaceChildren(...problems.map((p) => el("p", {text: p})));
    } else if (banner) banner.remove();
    for (const note of main.querySelectorAll(":scope > p.note")) note.remove();
    for (const block of blocks) {
      let section = document.getElementById("block-" + block.id);
      if (!section) {
        section = main.appendChild(el("section", {id: "block-" + block.id}, block.title ? el("h2", {}) : null));
      }
      const h2 = section.querySelector("h2");
      if (h2) h2.textContent = block.title;
      if (block.chart) { drawChart(section, block); continue; }
      const old = section.querySelector(":scope > .content");
      const content = el("div", {cls: "content"}, block.node);
      if (old) old.replaceWith(content); else section.append(content);
    }
  }

  let busy = null;
  let again = false;
  async function refresh() {
    if (busy) { again = true; return busy; }  // one fetch at a time; a round announced meanwhile fetches once more
    busy = (async () => {
      do {
        again = false;
        try {
          const answer = await fetch(apiPath(), {headers: {Accept: "application/json"}});
          const d = await answer.json();
          if (!answer.ok) {
            showNote(d.waiting ? "Waiting for the first sample of the cluster (" + d.error + ")" : d.error);
            continue;
          }
          show(RENDER[page](d), d);
          body.dataset.seq = d.seq;  // which round the page shows (the browser test waits on it)
        } catch (err) {
          showNote("cannot read " + apiPath() + ": " + err);
        }
      } while (again);
    })();
    try { await busy; } finally { busy = null; }
  }

  function showNote(text) {
    let note = main.querySelector(":scope > p.note");
    if (!note) note = main.appendChild(el("p", {cls: "note"}));
    note.textContent = text;
  }

  const events = new EventSource("/api/events");
  events.addEventListener("update", (e) => {
    const round = JSON.parse(e.data);
    live.textContent = "sample #" + round.seq + " · " + clock(round.taken_ms);
    live.className = "on";
    refresh();
  });
  events.onerror = () => { live.textContent = "reconnecting…"; live.className = "off"; };
  refresh();
})();
