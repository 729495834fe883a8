"""``python -m tuner.cli``: the same entry point as the ``draftwise`` console script."""

import sys

from tuner.cli import main

sys.exit(main())
