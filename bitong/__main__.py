"""`python -m bitong` is the `bitong` command."""

import sys

from .agent.cli.commands import main

sys.exit(main())
