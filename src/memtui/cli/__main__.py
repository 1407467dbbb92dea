"""`python -m memtui.cli`: the `memtui` command."""

import sys

from memtui.cli.main import main

sys.exit(main())
