"""Kept so that ``from gpuwarden.domain.windows import …`` goes on working: the code is in ``domain.schedule``."""

from gpuwarden.domain.schedule import *  # noqa: F403
from gpuwarden.domain.schedule import __all__ as __all__
