"""``python -m gateway`` runs the command line."""

import sys

from gateway.cli import main

sys.exit(main())
