"""``python -m nbworkers.kernelspec``: install or uninstall the nbworkers kernel."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
