"""`python -m agent` is `bitong`."""

import sys

from .cli import main

sys.exit(main())
