"""``asyncache demo``: hand the command line to ``asyncache.demo``."""

from __future__ import annotations

import argparse
import importlib

from .common import CliError

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache demo``; returns the exit status."""
    try:
        # By name: the demo pulls in its web and model dependencies.
        demo = importlib.import_module("asyncache.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "asyncache.demo":
            raise CliError(f"the demo needs {exc.name}: pip install 'asyncache-ml[all]'") from None
        print("the asyncache demo is coming: it will live in asyncache/demo/")
        return 0
    status = demo.main(list(args.demo_args))
    return int(status or 0)
