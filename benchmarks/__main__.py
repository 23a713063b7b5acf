"""``python -m benchmarks`` runs the harness."""

import sys

from benchmarks.run import main

sys.exit(main())
