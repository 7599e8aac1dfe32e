"""The ``asyncache`` command: look at, prune, clear, warm and move stores; run the demo.

::

    asyncache --version
    asyncache stats URL [--live HTTP_URL] [--json]
    asyncache prune URL
    asyncache clear URL [--yes]
    asyncache forget URL --tag T [--tag T2 ...] [--scope S] [--namespace N] [--dry-run]
    asyncache warm module:function FILE.jsonl [--store URL] [--concurrency N]
    asyncache copy SRC_URL DST_URL [--namespace N]
    asyncache export URL [--output FILE] [--namespace N]
    asyncache import URL [FILE]
    asyncache demo [demo options]

One module per command (``stats``, ``prune``, ``clear``, ``forget``, ``warm``, ``copy``,
``export``, ``import`` (in ``load``), ``demo``), each with a ``run(args)``;
``common`` and ``entries`` hold what they share. Every failure
the user can cause (a bad URL, a missing extra, an unreadable file, a module
that does not import) is one line on stderr and a non-zero exit;
``--traceback`` shows the whole story. Nothing the command prints or logs
shows a password: URLs appear as ``asyncache.redact.redact_url`` writes them,
and the secrets of the URLs on the command line are cut from every message
(usage errors, failures, tracebacks, warnings logged while it runs). Tables
and the progress bar use rich (``pip install 'asyncache-ml[cli]'``), imported
only when drawn. What a store holds comes from the store itself (its
``describe()``): the commands format.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from .. import __version__
from ..errors import ConfigurationError
from ..redact import redact_text
from .clear import run as run_clear
from .common import FAILED, USAGE, CliError, one_line
from .copy import run as run_copy
from .demo import run as run_demo
from .export import run as run_export
from .forget import run as run_forget
from .load import run as run_import
from .prune import run as run_prune
from .stats import run as run_stats
from .warm import run as run_warm

__all__ = ["main"]


class _UsageError(Exception):
    """A command line argparse rejects: raised so that ``main`` prints it redacted."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors (which quote the arguments) ``main`` prints."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


class _RedactingFormatter(logging.Formatter):
    """Log records as their message (as ``logging.lastResort`` prints them), redacted."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        super().__init__("%(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


@contextlib.contextmanager
def _redacted_logging(redact: Callable[[str], str]) -> Iterator[None]:
    """Warnings logged without a configured handler go to stderr redacted.

    Only ``logging.lastResort`` is replaced, for the duration: a program (or a
    module ``warm`` imports) that configures logging keeps its own handlers.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_RedactingFormatter(redact))
    previous = logging.lastResort
    logging.lastResort = handler
    try:
        yield
    finally:
        logging.lastResort = previous


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="asyncache",
        description="Look at, prune, clear, warm and move asyncache stores.",
    )
    parser.add_argument("--version", action="version", version=f"asyncache {__version__}")
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

    forget = commands.add_parser(
        "forget", help="drop every decision with some tags, or of a scope, on every replica"
    )
    forget.add_argument("url", help="store URL")
    forget.add_argument(
        "--tag", action="append", default=[], metavar="T", help="a tag (repeat for more)"
    )
    forget.add_argument("--scope", metavar="S", help="a scope (tenant) whose decisions go")
    forget.add_argument(
        "--namespace", metavar="N", help="the cache's namespace (DecisionCache(namespace=N))"
    )
    forget.add_argument("--dry-run", action="store_true", help="count, drop nothing")
    forget.add_argument("--no-progress", action="store_true", help="no progress bar")
    forget.add_argument("--json", action="store_true", help="print the result as JSON")
    forget.set_defaults(run=run_forget)

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

    copy = commands.add_parser("copy", help="copy live entries into another store")
    copy.add_argument("src", metavar="SRC_URL", help="the store to read")
    copy.add_argument("dst", metavar="DST_URL", help="the store to add to (its entries win)")
    copy.add_argument("--namespace", metavar="N", help="only entries of caches named N")
    copy.add_argument("--no-progress", action="store_true", help="no progress bar")
    copy.add_argument("--json", action="store_true", help="print the summary as JSON")
    copy.set_defaults(run=run_copy)

    export = commands.add_parser("export", help="write live entries as JSON Lines")
    export.add_argument("url", help="store URL")
    export.add_argument("-o", "--output", metavar="FILE", help="write FILE, not stdout")
    export.add_argument("--namespace", metavar="N", help="only entries of caches named N")
    export.add_argument("--no-progress", action="store_true", help="no progress bar")
    export.set_defaults(run=run_export)

    load = commands.add_parser("import", help="add entries from JSON Lines (an export)")
    load.add_argument("url", help="store URL (a new SQLite file is created)")
    load.add_argument("file", nargs="?", default="-", help="the export; - or none reads stdin")
    load.add_argument("--no-progress", action="store_true", help="no progress bar")
    load.add_argument("--json", action="store_true", help="print the summary as JSON")
    load.set_defaults(run=run_import)

    demo = commands.add_parser(
        "demo", help="a model service behind asyncache, under load", add_help=False
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    demo.set_defaults(run=run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``asyncache`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Every argument that may be a URL (or hold one: --store=URL): what is cut from messages.
    urls = [arg for arg in argv if "://" in arg or "@" in arg]

    def redact(text: str) -> str:
        return redact_text(text, urls)

    parser = _parser()
    try:
        # The demo has its own options (and --help): everything after "demo" is passed on.
        args, extra = parser.parse_known_args(argv)
        if extra:
            if args.command != "demo":
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            args.demo_args = [*extra, *args.demo_args]
    except _UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {redact(exc.message)}", file=sys.stderr)
        return USAGE
    # The demo is a program of its own, with its own logging.
    logs = contextlib.nullcontext() if args.command == "demo" else _redacted_logging(redact)
    with logs:
        try:
            status: int = args.run(args)
        except KeyboardInterrupt:
            print("asyncache: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:
            if args.traceback:
                print(redact("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
                return FAILED
            print(f"asyncache: error: {redact(one_line(exc))}", file=sys.stderr)
            if isinstance(exc, CliError):
                return exc.status
            return USAGE if isinstance(exc, ConfigurationError) else FAILED
    return status
