"""`merge-reports`: merge the --conformance-report JSON files of the shards of one run (--conformance-shard I/N)
into one report (conformance.plugin.merge); reports of different runs, a missing or repeated shard, or an
incomplete report are refused with one line (exit 2)."""
from __future__ import annotations

import json
import sys

NAME = "merge-reports"
HELP = "merge the JSON reports of the shards of one run (--conformance-shard I/N) into one report"


def add_arguments(parser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="one --conformance-report file per shard")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write the merged report")


def run(args) -> int:
    from conformance.plugin import merge
    from conformance.reports import files

    files.writable_file("--out", args.out)  # checked before reading: no work thrown away on an unwritable path
    doc = merge.merge([(path, merge.load(path)) for path in args.reports])
    files.atomic_write_text(args.out, json.dumps(doc, indent=1, default=str), "--out")
    n_bad = sum(1 for r in doc["records"] if r.get("outcome") in ("fail", "error"))
    print(f"wrote {args.out}: {doc['shard']['count']} shards, {len(doc['records'])} records ({n_bad} fail/error), "
          f"seed {doc['seed']}, commit {doc['commit'] or 'unknown'}", file=sys.stderr)
    return 0
