"""``python -m gbflow``: the command line (``gbflow.cli``)."""
import sys

from .cli import main

sys.exit(main())
