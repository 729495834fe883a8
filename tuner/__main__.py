"""``python -m tuner`` runs the ``draftwise`` command."""

import sys

from tuner.cli import main

sys.exit(main())
