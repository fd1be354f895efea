"""Budget windows (docs: policy reference, "windows"): pure window arithmetic, no I/O and no clock.

Every function takes ``now`` (or another instant) as an argument; instants must be
timezone-aware, results are UTC. One job per module:

- ``cron``       5-field cron expressions, matched on naive wall-clock minutes
- ``zones``      wall clock ↔ instant in a time zone: the DST rules of fire times
- ``durations``  ``10h`` / ``1h30m`` text ↔ timedelta, and the bounds of a window's duration
- ``model``      the policy's ``Window`` and one occurrence of it (``OpenWindow``, ``Slot``)
- ``planning``   which windows are open, allowed slots, the latest window before a deadline
- ``allowance``  how many more voluntary disruptions are allowed now, and by whose say
- ``nodepool``   what the windows write on a Karpenter NodePool, never looser than its own
"""

from gpuwarden.domain.windows.allowance import Allowance, voluntary_allowance
from gpuwarden.domain.windows.cron import SEARCH_LIMIT, CronError, CronSchedule, parse_cron
from gpuwarden.domain.windows.durations import MAX_DURATION, format_duration, parse_duration
from gpuwarden.domain.windows.model import OpenWindow, Slot, Window, Windows, validate_windows
from gpuwarden.domain.windows.nodepool import NodePoolDesired, desired_nodepool_state
from gpuwarden.domain.windows.planning import allowed_slots, latest_allowed_window_before, next_change, open_windows
from gpuwarden.domain.windows.zones import next_fire, prev_fire, wall_to_instant

__all__ = [
    "MAX_DURATION",
    "SEARCH_LIMIT",
    "Allowance",
    "CronError",
    "CronSchedule",
    "NodePoolDesired",
    "OpenWindow",
    "Slot",
    "Window",
    "Windows",
    "allowed_slots",
    "desired_nodepool_state",
    "format_duration",
    "latest_allowed_window_before",
    "next_change",
    "next_fire",
    "open_windows",
    "parse_cron",
    "parse_duration",
    "prev_fire",
    "validate_windows",
    "voluntary_allowance",
    "wall_to_instant",
]
