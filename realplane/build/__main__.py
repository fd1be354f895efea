"""`python -m realplane.build`: see `realplane.build.build`."""

import sys

from realplane.build.build import main

sys.exit(main())
