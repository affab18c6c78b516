"""The outputs of a `python -m bench` run: the RESULTS.md tables (one per sweep, one column per target) and the
PNG chart (one panel per sweep)."""
from __future__ import annotations

import time
from pathlib import Path

SCENARIO_ORDER = ("produce", "consume", "latency", "e2e")
SWEEPS = {
    "base": ("Message size and acks", ("size", "acks")),
    "compression": ("Compression codec (1 KiB text values, acks=1)", ("compression",)),
    "partitions": ("Partition count (1 KiB, acks=1)", ("partitions",)),
    "clients": ("Client processes at once (1 KiB, acks=1)", ("clients",)),
    "security": ("Security protocol (1 KiB, acks=1; TLS server-verified, SASL_SSL with SCRAM-SHA-512)", ("protocol",)),
    "host": ("Host mode: broker.processes = N on one server (bench.suite.host_sweep)", ("processes",)),
    "controller": ("Controller: seconds and controller CPU per thousand partitions, 3 brokers RF 3 "
                   "(bench.suite.controller)", ("step",)),
}
# host and controller start clusters of their own and take minutes: asked for by name
DEFAULT_SWEEPS = tuple(s for s in SWEEPS if s not in ("host", "controller"))
HEADERS = {"size": "size (B)", "acks": "acks", "compression": "codec", "partitions": "partitions",
           "clients": "clients", "protocol": "protocol"}


def figure(r: dict) -> str:
    if "error" in r:
        return "error: " + r["error"][:80].replace("|", "/")
    if "skipped" in r:
        return ""  # the broker has no such listener (Tansu and TLS)
    if r["scenario"] in ("produce", "consume"):
        frac = r.get("frac_disk", r.get("frac_tcp"))
        return f"{r['mb_s']} MB/s ({r['msgs_s']}/s, {frac:.1%} of {'disk' if 'frac_disk' in r else 'TCP'})"
    if r.get("p50_ms") is None:
        return "-"
    lost = f" ({r['lost']} of {r['lost'] + r['messages']} lost)" if r.get("lost") else ""
    return f"{r['p50_ms']} / {r['p99_ms']} / {r['p999_ms']} ms{lost}{backlog(r)}"


def backlog(r: dict) -> str:
    """A latency cell's warning when the target fell behind the offered rate (bench.harness.latency.pacing): its
    percentiles then measure the client's queue, and the cell says what rate was achieved."""
    if not r.get("backlog"):
        return ""
    done = r.get("acked_msgs_s", r.get("received_msgs_s")) or 0
    offered = r.get("offered_msgs_s") or r.get("rate") or 0
    after = r.get("flush_ms", r.get("drain_ms")) or 0
    what = "acknowledged" if r["scenario"] == "latency" else "received"
    return f" (backlog: {done:.0f} of {offered:.0f} msgs/s {what}, the last {after:.0f} ms after the last send)"


def row_key(r: dict, fields: tuple[str, ...]) -> tuple:
    order = SCENARIO_ORDER.index(r["scenario"]) if r["scenario"] in SCENARIO_ORDER else 9
    return (order, *(str(r[f]).zfill(8) if isinstance(r[f], int) else str(r[f]) for f in fields), r["scenario"])


def table(results: list[dict], sweep: str, columns: list[str]) -> list[str]:
    title, fields = SWEEPS[sweep]
    mine = [r for r in results if r.get("sweep") == sweep]
    if not mine:
        return []
    if sweep == "host":
        return host_table(title, mine)
    if sweep == "controller":
        return controller_table(title, mine)
    rows: dict[tuple, dict[str, dict]] = {}
    for r in mine:
        rows.setdefault(row_key(r, fields), {})[r["target"]] = r
    lines = [f"## {title}", "",
             "| scenario | " + " | ".join(HEADERS[f] for f in fields) + " | " + " | ".join(columns) + " |",
             "|---|" + "---|" * len(fields) + "---|" * len(columns)]
    for key in sorted(rows):
        cells = rows[key]
        any_r = next(iter(cells.values()))
        lines.append(f"| {any_r['scenario']} | " + " | ".join(str(any_r[f]) for f in fields) + " | "
                     + " | ".join(figure(cells[c]) if c in cells else "-" for c in columns) + " |")
    return lines + [""]


def host_table(title: str, records: list[dict]) -> list[str]:
    """One row per N: max MB/s and T(N)/T(1), paced CPU-seconds per million records and its ratio to N = 1,
    the CPU sets (medians over the rounds, bench.suite.host_sweep.ratios)."""
    from bench.suite.host_sweep import ratios

    scaling = ratios([r for r in records if r.get("kind") == "result"])
    if not scaling:
        return []
    first = next((r for r in records if r.get("kind") == "result" and "shared" in r), {})
    lines = [f"## {title}", "",
             f"1 KiB values, acks={first.get('acks')}, {first.get('partitions')} partitions, replication factor "
             f"{first.get('replication')}, {first.get('clients')} producer process(es) on cpus "
             f"{first.get('client_cpus')}{' (shared with the brokers)' if first.get('shared') else ''}; paced at "
             f"{scaling[0].get('offered_msgs_s')} msgs/s for every N. CPU: every process of kbroker serve.", "",
             "| N | broker cpus | max MB/s | T(N)/T(1) | paced CPU s / M records | / N=1 |",
             "|---|---|---|---|---|---|"]
    for r in scaling:
        cpus = ", ".join(f"{k.split()[-1]}: {v}" for k, v in sorted((r.get("broker_cpus") or {}).items()))
        lines.append(f"| {r['processes']} | {cpus} | {r['max_mb_s']} | {r['t_over_t1']} | "
                     f"{r['paced_cpu_s_per_m_records']} | {r['cpu_per_m_over_n1']} |")
    return lines + [""]


def controller_table(title: str, records: list[dict]) -> list[str]:
    """One row per step and N, in the order they ran: seconds, the controller's CPU seconds, both per thousand of
    the partitions the step acted on."""
    lines = [f"## {title}", "", "| step | N | step partitions | seconds | s / 1000 | controller CPU s | "
             "CPU s / 1000 | note |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        note = r.get("error", "")
        if "after_expiry_s" in r:
            note = f"session expiry at {r['expiry_s']} s, then {r['after_expiry_s']} s"
        lines.append(f"| {r.get('step')} | {r.get('partitions')} | {r.get('step_partitions', '-')} | "
                     f"{r.get('seconds', '-')} | {r.get('seconds_per_k', '-')} | {r.get('controller_cpu_s', '-')} | "
                     f"{r.get('controller_cpu_s_per_k', '-')} | {str(note)[:120].replace('|', '/')} |")
    return lines + [""]


def write_markdown(path: Path, lim: dict, results: list[dict], columns: list[str], command: str,
                   elapsed_s: float) -> None:
    lines = ["# Benchmark results", "",
             f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M:%S %Z')} in {elapsed_s:.0f} s; the latest "
             "run only, figures comparable within it.", "",
             f"Machine limits measured first: sequential disk write {lim['disk_write_mb_s']} MB/s, loopback TCP "
             f"{lim['tcp_mb_s']} MB/s, loopback round trip {lim['tcp_rtt_us']} µs.", "",
             "Throughput: MB/s of values (messages/s, fraction of a limit). Produce is a fraction of the disk "
             "write limit (for the 3-broker cluster, the three replicas' writes: 3 x MB/s, all on this one disk); "
             "consume of the loopback TCP limit. Latency: p50 / p99 / p999 at a fixed rate, send to "
             "acknowledgement (`latency`; with acks=0 the client's own completion) and send to receive "
             "(`e2e`); \"backlog\" marks a run whose target fell behind the rate (messages waited over 10 ms, "
             "and the wait grew over the run or the completions fell more than 5 % short of the rate: "
             "bench.harness.latency.pacing), with the rate achieved and the wait after the last send. With acks=0 a "
             "produce run's clock stops when the broker serves every partition's last message. Tansu 0.6 has no "
             "ZooKeeper-mode cluster: the cluster column is kbroker's alone. Values are text (bench/harness/values.py) "
             "that lz4 halves and zstd cuts to a third.", ""]
    for sweep in SWEEPS:
        lines += table(results, sweep, columns)
        if sweep == "security":
            lines += [f"- {r['target']} {r['scenario']} over {r['protocol']}: {r['ratio']:.2f} of PLAINTEXT "
                      f"({1 - r['ratio']:.0%} lost)" for r in security_ratios(results)] + [""]
    path.write_text("\n".join(lines))


def security_ratios(results: list[dict]) -> list[dict]:
    """The cost of TLS and SASL_SSL: each protocol's MB/s as a fraction of PLAINTEXT's, per target and scenario."""
    out = []
    plain = {(r["target"], r["scenario"]): r["mb_s"] for r in results
             if r.get("sweep") == "security" and r.get("protocol") == "PLAINTEXT" and "mb_s" in r}
    for r in results:
        base = plain.get((r.get("target"), r.get("scenario")))
        if r.get("sweep") == "security" and r.get("protocol") != "PLAINTEXT" and "mb_s" in r and base:
            out.append({"kind": "security_ratio", "target": r["target"], "scenario": r["scenario"],
                        "protocol": r["protocol"], "ratio": round(r["mb_s"] / base, 3)})
    return out


GROUP_FIELDS = ("target", "sweep", "scenario", "size", "acks", "compression", "partitions", "clients", "protocol")
FIGURES = ("mb_s", "msgs_s", "elapsed_s", "frac_disk", "frac_tcp", "p50_ms", "p99_ms", "p999_ms", "frac_rtt",
           "broker_cpu_s", "offered_msgs_s", "acked_msgs_s", "received_msgs_s", "flush_ms", "drain_ms",
           "first_quarter_p50_ms", "last_quarter_p50_ms")


def medians(results: list[dict]) -> list[dict]:
    """Each figure's median over the rounds of one cell (--rounds), with every round's value beside it; a
    cell whose every round failed keeps the last error."""
    cells: dict[tuple, list[dict]] = {}
    for r in results:
        cells.setdefault(tuple(r.get(f) for f in GROUP_FIELDS), []).append(r)
    out = []
    for rounds in cells.values():
        good = [r for r in rounds if "error" not in r and "skipped" not in r]
        m = {**(good or rounds)[-1], "kind": "median", "rounds": len(rounds), "failed_rounds": len(rounds) - len(good)}
        for f in FIGURES:
            values = [r[f] for r in good if isinstance(r.get(f), (int, float))]
            if values:
                values.sort()
                mid = len(values) // 2
                m[f] = values[mid] if len(values) % 2 else round((values[mid - 1] + values[mid]) / 2, 4)
                if all(isinstance(v, int) for v in values):
                    m[f] = round(m[f])
                m[f + "_rounds"] = [r[f] for r in good if isinstance(r.get(f), (int, float))]
        flags = [r["backlog"] for r in good if isinstance(r.get("backlog"), bool)]
        if flags:  # a latency cell: backlog when most rounds had one
            m["backlog"], m["backlog_rounds"] = 2 * sum(flags) > len(flags), flags
        out.append(m)
    return out


def write_chart(path: Path, results: list[dict], columns: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for sweep, (title, fields) in SWEEPS.items():
        if sweep not in ("host", "controller") and any(r.get("sweep") == sweep for r in results):  # tables only
            panels.append((sweep, title, fields, ("produce", "consume"), "mb_s", "MB/s"))
            if sweep == "base":
                panels.append((sweep, title + ": latency", fields, ("latency", "e2e"), "p99_ms", "p99 (ms)"))
    if not panels:  # a host or controller sweep alone: its table is the whole report
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 4.2 * max(len(panels), 1)), squeeze=False)
    for ax, (sweep, title, fields, scenarios, value, ylabel) in zip(axes[:, 0], panels):
        mine = [r for r in results if r.get("sweep") == sweep and r["scenario"] in scenarios]
        labels = sorted({row_key(r, fields) for r in mine})
        width = 0.8 / max(len(columns), 1)
        for i, column in enumerate(columns):
            vals = []
            for lab in labels:
                r = next((r for r in mine if row_key(r, fields) == lab and r["target"] == column), {})
                vals.append(r.get(value) or 0)
            ax.bar([x + i * width for x in range(len(labels))], vals, width, label=column)
        ax.set_xticks([x + width * (len(columns) - 1) / 2 for x in range(len(labels))])
        ax.set_xticklabels(["\n".join([lab[-1]] + [f"{f}={v.lstrip('0') or '0'}" for f, v in zip(fields, lab[1:-1])])
                            for lab in labels], fontsize=7)
        ax.set_ylabel(ylabel)
        if value == "p99_ms" and any(r.get(value) for r in mine):
            ax.set_yscale("log")  # sub-millisecond next to hundreds of milliseconds
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("kbroker benchmark (python -m bench)")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90)
    plt.close(fig)
