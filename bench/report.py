#!/usr/bin/env python3
"""Writes docs/performance.md from the benchmark records in bench/results/ (bench/record.sh).

Every number on that page comes from a record: per label and machine (the CPU model: the hosts
differ between sessions, and a target met on one kind says nothing of another) the latest record
is shown, with its command, date, commit, machine and the CPU other processes took, its rows with median and
spread, and each --target it was recorded against (met, missed, or not counted when the record
was taken on a loaded machine). The prose around the records is bench/performance_intro.md.

    bench/report.py            rewrite docs/performance.md
    bench/report.py --check    exit 1 when docs/performance.md differs from what it would write
"""
import argparse
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generation(cpu_id):
    """A CPU's generation from its vendor, family and model (the ones these hosts come in)."""
    family, model = cpu_id["family"], cpu_id["model"]
    if cpu_id["vendor"] == "AuthenticAMD":
        if family == 0x1A:
            return "Zen 5"
        if family == 0x19:
            return "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else "Zen 3"
        if family == 0x17:
            return "Zen 2" if model >= 0x30 else "Zen"
    if cpu_id["vendor"] == "GenuineIntel" and family == 6:
        xeons = {0x55: "Skylake/Cascade Lake", 0x6A: "Ice Lake", 0x8F: "Sapphire Rapids",
                 0xCF: "Emerald Rapids", 0xAD: "Granite Rapids"}
        if model in xeons:
            return xeons[model]
    return f"family {family} model {model}"


def machine_of(record):
    """The machine kind: the CPU's name, and its generation where the record has it (records
    before 2026-12-07 have only the name, which a VM may give as just "AMD EPYC")."""
    machine = record.get("machine", {})
    name = machine.get("cpu", "unknown machine")
    cpu_id = machine.get("cpu_id")
    return f"{name} ({generation(cpu_id)})" if cpu_id else name


def load_records(results_dir):
    """The latest record of each (label, machine), as a list ordered by label, newest first."""
    latest = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path) as f:
            try:
                record = json.load(f)
            except json.JSONDecodeError as error:
                sys.exit(f"report: {path} is not valid JSON ({error}); delete or re-record it")
        for key in ("label", "date", "result", "status"):
            if key not in record:
                sys.exit(f"report: {path} lacks '{key}'; it was not written by bench/record.sh")
        record["file"] = os.path.relpath(path, REPO)
        key = (record["label"], machine_of(record))
        if key not in latest or record["date"] > latest[key]["date"]:
            latest[key] = record
    ordered = sorted(latest.values(), key=lambda r: r["date"], reverse=True)
    ordered.sort(key=lambda r: r["label"])
    # The newest record of a label keeps the plain anchor; the others add their machine.
    seen = set()
    for record in ordered:
        label = record["label"]
        slug = "".join(c if c.isalnum() else "-" for c in machine_of(record).lower()).strip("-")
        record["anchor"] = label if label not in seen else f"{label}-{slug}"
        seen.add(label)
    return ordered


def number(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if x == 0:
        return "0"
    magnitude = abs(x)
    if magnitude >= 1000:
        return f"{x:,.0f}"
    if magnitude >= 100:
        return f"{x:.1f}"
    if magnitude >= 1:
        return f"{x:.3f}"
    return f"{x:.4f}"


def spread(row):
    if "spread" in row:  # a script that reports only the extremes
        return f"{number(row['spread'][0])}–{number(row['spread'][1])}"
    rounds = row.get("rounds") or []
    if len(rounds) < 2:
        return "–"
    return f"{number(min(rounds))}–{number(max(rounds))}"


def parse_target(target):
    op = "<=" if "<=" in target else ">="
    name, value = target.split(op)
    return name, op, float(value)


def target_verdict(record, row, op, bound):
    if record["status"] != "ok":
        return "not counted (loaded)"
    met = row["value"] <= bound if op == "<=" else row["value"] >= bound
    return "**met**" if met else "**missed**"


def when(record):
    d = record["date"]  # YYYYmmddTHHMMSSZ
    return f"{d[0:4]}-{d[4:6]}-{d[6:8]} {d[9:11]}:{d[11:13]} UTC"


def commit_of(record):
    short = record.get("commit", "unknown")[:7]
    return short + (" (uncommitted changes)" if record.get("dirty") else "")


def other_load(record):
    o = record.get("other_cores", {})
    return f"{o.get('before', 0):.2f} / {o.get('during', 0):.2f} / {o.get('after', 0):.2f}"


def rows_by_name(record):
    return {row["name"]: row for row in record["result"]["rows"]}


def targets_table(records):
    lines = ["| record | row | metric | target | median | spread over rounds | verdict | machine | date | commit | other cores (before / during / after) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for record in records:
        label = record["label"]
        rows = rows_by_name(record)
        for target in record.get("targets", []):
            name, op, bound = parse_target(target)
            row = rows.get(name)
            if row is None:
                sys.exit(f"report: {record['file']}: target '{target}' names no row")
            lines.append(f"| [{label}](#{record['anchor']}) | {name} | {row['metric']} | {op} {number(bound)} | "
                         f"{number(row['value'])} | {spread(row)} | {target_verdict(record, row, op, bound)} | "
                         f"{machine_of(record)} | {when(record)} | {commit_of(record)} | {other_load(record)} |")
    return lines if len(lines) > 2 else []


def unmeasured(records):
    """Per machine that has records, the labels with targets it has no record of."""
    machines = sorted({machine_of(r) for r in records})
    with_targets = sorted({r["label"] for r in records if r.get("targets")})
    lines = []
    for machine in machines:
        measured = {r["label"] for r in records if machine_of(r) == machine}
        missing = [label for label in with_targets if label not in measured]
        if missing:
            lines.append(f"- not measured on **{machine}**: " + ", ".join(missing))
    return lines


def record_section(label, record):
    m = record.get("machine", {})
    flag = "" if record["status"] == "ok" else \
        " **Loaded: other processes took more than half a core; not counted against targets.**"
    lines = [f'<a id="{record["anchor"]}"></a>', f"## {record.get('title', label)} ({machine_of(record)})", "",
             f"- command: `{record.get('command', '?')}`",
             f"- recorded {when(record)} at commit {commit_of(record)}, in {record.get('wall_s', 0):.0f} s; "
             f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB",
             f"- other processes' CPU use, cores before / during / after: {other_load(record)} "
             f"(load average before {record.get('loadavg', {}).get('before', '?')}){flag}",
             f"- record: `{record['file']}`", ""]
    described = [l for l in record.get("output", []) if l.startswith(("model:", "run:", "blas:"))]
    if described:
        lines += [f"    {l}" for l in described] + [""]
    lines += ["| row | metric | median | spread over rounds | per round |", "| --- | --- | --- | --- | --- |"]
    for row in record["result"]["rows"]:
        rounds = ", ".join(number(x) for x in row.get("rounds", []))
        lines.append(f"| {row['name']} | {row['metric']} | {number(row['value'])} | {spread(row)} | {rounds} |")
    tables = [l for l in record.get("output", []) if l.startswith("|")]
    if tables:
        lines += ["", "The script's own table:", ""] + tables
    return lines + [""]


def render(records):
    with open(os.path.join(REPO, "bench", "performance_intro.md")) as f:
        intro = f.read().rstrip("\n").splitlines()
    lines = ["<!-- Generated by bench/report.py from bench/results/*.json: edit bench/performance_intro.md",
             "     or record new runs (bench/record.sh, bench/all.sh), then run bench/report.py. -->"]
    lines += intro + [""]
    targets = targets_table(records)
    lines += ["## Targets", ""]
    if targets:
        lines += ["Each target as recorded by `bench/all.sh` on each machine kind (the latest record of each); "
                  "the verdict is computed from the record's median.", ""]
        lines += targets + [""]
        missing = unmeasured(records)
        if missing:
            lines += ["Targets with no record on a machine kind that has others:", ""] + missing + [""]
    else:
        lines += ["No record carries a target yet.", ""]
    lines += ["# Records", ""]
    if not records:
        lines += ["No records yet: run `bench/all.sh`.", ""]
    for record in records:
        lines += record_section(record["label"], record)
    return "\n".join(lines).rstrip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "performance.md"))
    args = parser.parse_args()
    text = render(load_records(args.results))
    if args.check:
        current = open(args.output).read() if os.path.exists(args.output) else ""
        if current != text:
            sys.exit(f"report: {os.path.relpath(args.output, REPO)} is not what bench/report.py writes from "
                     "bench/results/; run bench/report.py (and edit bench/performance_intro.md, not the page)")
        return
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
