"""Entry script of the PyInstaller bundle: the same ``draftwise`` command as the console script.

No arguments start the tray app; sub-commands run headless (see ``tuner.cli``).
"""

import multiprocessing
import sys

from tuner.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # harmless on Linux; needed if a frozen Windows build forks workers
    sys.exit(main())
