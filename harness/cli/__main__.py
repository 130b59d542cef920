"""``python3 -m harness.cli``: the kdrill command."""

import sys

from harness.cli import main

sys.exit(main())
