"""Format 2's files, under the names callers outside the store import from here: re-exported only.

The code is in :mod:`.tails` (the live tail's lines), :mod:`.seal` (segments written),
:mod:`.catalogue` (which files a run holds, which to read), :mod:`.segreads` (step columns and
records read back), :mod:`.aggreads` (aggregates read back) and :mod:`.segcache` (what the reads
keep of a segment between calls). Import those; this module goes once its callers do.
"""

from .aggreads import read_aggregates
from .catalogue import listing
from .seal import write_columns
from .segreads import read_records, read_step_columns, step_range

__all__ = ["listing", "read_aggregates", "read_records", "read_step_columns", "step_range", "write_columns"]
