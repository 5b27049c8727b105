"""`python -m perf`: the lab's commands (perf/lab/commands.py)."""

import sys

from perf.lab.commands import main

if __name__ == "__main__":
    sys.exit(main())
