"""The middleware's hit with its default settings (Server-Timing on), before and after.

    .venv/bin/python benchmarks/middleware_timing.py --before-ref cf49116
    .venv/bin/python benchmarks/middleware_timing.py --before ../other-checkout --quick

Runs ``middleware.py --timing``: in process, the hit with Server-Timing off and
on; then side by side over uvicorn and granian (``middleware.py``'s part 3:
the servers share one CPU and are driven at once, each round's throughput
over the constant response's), the hits of this checkout and of the "before"
one (``git archive`` of a ref, or a checkout) served at the same time, with
the bound of this checkout's hit: the same hit with the engine's step one dict
lookup. Needs ``wrk``, Linux and two CPUs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hit_path_before_after import before_options, before_tree

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    before_options(parser)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    parser.add_argument(
        "--rounds", type=int, help="side-by-side rounds (10; more: steadier medians)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tree, said = before_tree(args, Path(scratch))
        out = Path(scratch) / "timing.json"
        command = [sys.executable, str(HERE / "middleware.py"), "--timing", "--before", str(tree)]
        command += ["--json", str(out)] + ["--quick"] * args.quick
        command += ["--rounds", str(args.rounds)] if args.rounds else []
        subprocess.run(command, check=True)
        table = json.loads(out.read_text())["timing_side_by_side"]
    if args.json:
        inside = table.pop("in_process_us")
        notes = [
            # The unpacked checkout's folder is temporary: name what the command line named.
            table.pop("description").replace(str(tree), said.split(" ", 1)[1]),
            "In process (raw ASGI calls, best of 7 interleaved rounds), this checkout: "
            + ", ".join(f"hit with {name}: {us:.2f} us" for name, us in inside.items()),
            "Server-Timing's share kept: per round, the default-settings hit's ratio over the "
            "server_timing=False hit's; the constant+timing row sends a constant "
            "Server-Timing header of the same length, so the hit's ratio to it counts only "
            "the making of the header.",
            "The bound: the default-settings hit with the engine's hit step replaced, after "
            "the first hit, by one dict lookup (no store read, no expiry, no memo check, no "
            "count; benchmarks/middleware.py's engine_bound): what the middleware's own steps "
            "cost on this server, and so the most any engine could make of this hit here.",
        ]
        document = {
            "title": "The middleware's hit with its default settings, before and after",
            "command": f"python benchmarks/middleware_timing.py {said}"
            + " --quick" * args.quick
            + (f" --rounds {args.rounds}" if args.rounds else ""),
            "columns": table["columns"],
            "rows": table["rows"],
            "notes": notes,
        }
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
