"""``python -m reliability`` runs the suite."""

import sys

from reliability.run import main

sys.exit(main())
