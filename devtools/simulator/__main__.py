"""``python -m devtools.simulator SCENARIO ...``"""

import sys

from .cli import main

sys.exit(main())
