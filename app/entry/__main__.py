"""`python -m app.entry`: the same as the `lethe` command."""

import sys

from app.entry.main import main

sys.exit(main())
