"""``python -m asyncache.demo``: the same as ``asyncache demo``."""

from .run import main

raise SystemExit(main())
