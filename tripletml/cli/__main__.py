"""``python -m tripletml.cli``."""
import sys

from tripletml.cli import main

sys.exit(main())
