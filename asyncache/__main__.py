"""``python -m asyncache``: the ``asyncache`` command."""

import sys

from .cli import main

sys.exit(main())
