"""``python3 -m sglang_interface_check``: see cli.py and the package docstring."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
