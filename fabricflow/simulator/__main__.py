"""``python -m fabricflow.simulator SCENARIO ...``"""

import sys

from .cli import main

sys.exit(main())
