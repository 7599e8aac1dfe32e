"""The ``asyncache`` command: look at, prune, clear and warm stores; run the demo.

::

    asyncache stats URL [--live HTTP_URL] [--json]
    asyncache prune URL
    asyncache clear URL [--yes]
    asyncache warm module:function FILE.jsonl [--store URL] [--concurrency N]
    asyncache demo [demo options]

One module per command (``stats``, ``prune``, ``clear``, ``warm``, ``demo``),
each with a ``run(args)``, and ``common`` for what they share. Every failure
the user can cause (a bad URL, a missing extra, an unreadable file, a module
that does not import) is one line on stderr and a non-zero exit;
``--traceback`` shows the whole story. Tables and the progress bar use rich
(``pip install 'asyncache-ml[cli]'``), imported only when drawn. What a store
holds comes from the store itself (its ``describe()``): the commands format.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import ConfigurationError
from .clear import run as run_clear
from .common import FAILED, USAGE, CliError, one_line
from .demo import run as run_demo
from .prune import run as run_prune
from .stats import run as run_stats
from .warm import run as run_warm

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncache",
        description="Look at, prune, clear and warm asyncache stores.",
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of failures")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stats = commands.add_parser("stats", help="entries, bytes and expiries of a store")
    stats.add_argument("url", nargs="?", help="store URL (sqlite:///path, redis://host...)")
    stats.add_argument("--live", metavar="HTTP_URL", help="a live process's stats JSON endpoint")
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.set_defaults(run=run_stats)

    prune = commands.add_parser("prune", help="drop expired entries")
    prune.add_argument("url", help="store URL")
    prune.set_defaults(run=run_prune)

    clear = commands.add_parser("clear", help="drop every entry (asks first)")
    clear.add_argument("url", help="store URL")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(run=run_clear)

    warm = commands.add_parser("warm", help="compute known requests ahead of traffic")
    warm.add_argument("function", help="module:function, a @cached_prediction function")
    warm.add_argument(
        "file",
        help="JSON Lines: an object per line is keyword arguments, an array positional "
        "arguments, anything else the single argument; - reads stdin",
    )
    warm.add_argument("--store", metavar="URL", help="warm this store instead of the function's")
    warm.add_argument("--concurrency", type=int, default=8, help="calls at once (default 8)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar")
    warm.add_argument("--json", action="store_true", help="print the summary as JSON")
    warm.set_defaults(run=run_warm)

    demo = commands.add_parser(
        "demo", help="a model service behind asyncache, under load", add_help=False
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    demo.set_defaults(run=run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``asyncache`` command; returns the exit status."""
    parser = _parser()
    # The demo has its own options (and --help): everything after "demo" is passed on.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "demo":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.demo_args = [*extra, *args.demo_args]
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        print("asyncache: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.traceback:
            raise
        print(f"asyncache: error: {one_line(exc)}", file=sys.stderr)
        if isinstance(exc, CliError):
            return exc.status
        return USAGE if isinstance(exc, ConfigurationError) else FAILED
    return status
