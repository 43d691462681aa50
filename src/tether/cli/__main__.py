"""``python -m tether.cli STAGE ...`` (what ``torchrun -m tether.cli`` runs on every rank)."""

import sys

from tether.cli import main

sys.exit(main())
