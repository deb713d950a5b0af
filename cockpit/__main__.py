"""`python -m cockpit` is the `cockpit` command."""

import sys

from cockpit.cli import main

sys.exit(main())
