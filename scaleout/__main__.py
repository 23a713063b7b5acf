"""``python -m scaleout`` runs the scale-out scenarios and writes SCALEOUT.md."""

import sys

from scaleout.run import main

sys.exit(main())
