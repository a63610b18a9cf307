"""``python -m nbworkers.kernelspec``: install or uninstall the nbworkers kernel."""

import sys

from nbworkers.kernelspec.cli import main

if __name__ == "__main__":
    sys.exit(main())
