"""The tuples the hot path appends to the recorder's buffer: their kinds and named field positions.

An event is one plain tuple (the cheapest thing to build on the hot path); readers index it through
the names below, never by counting fields. Timestamps are ``time.perf_counter_ns()`` integers (the
pipeline turns them into epoch seconds); every event's ``T`` is the time it was appended, so the
buffer is in time order for one thread. The device-timed kinds (the CUDA recorder's ``*_DEV``) carry
their host kind's fields, then the interval's start and end CUDA events (recorded on the current
stream, read later by the pipeline). What each kind's fields mean: the comments below.
"""

STEP_BEGIN = 0
STEP_END = 1
PHASE = 2
COLLECTIVE = 3
DATA = 4
LOG = 5
DEVICE = 6
STEP_END_DEV = 7
PHASE_DEV = 8
COLLECTIVE_DEV = 9
CHECKPOINT = 10

# Each device-timed kind and the host kind it extends.
HOST_KIND = {STEP_END_DEV: STEP_END, PHASE_DEV: PHASE, COLLECTIVE_DEV: COLLECTIVE}

# Fields every event has
KIND = 0
T = 1  # when the event was appended (for an interval: its end)

# STEP_BEGIN, STEP_END(_DEV). STEP_BEGIN (kind, t_begin, index) is not appended by the recorders (STEP_END
# carries the step's start; the heartbeat reads the open step off the recorder): kept, and skipped by the
# assembler, for event lists made by hand.
STEP_INDEX = 2
STEP_T0 = 3
STEP_OK = 4
STEP_TOKENS = 5
STEP_SAMPLES = 6
STEP_E0 = 7
STEP_E1 = 8

# PHASE(_DEV)
PHASE_NAME = 2
PHASE_T0 = 3
PHASE_OK = 4
PHASE_E0 = 5
PHASE_E1 = 6

# COLLECTIVE(_DEV)
COLL_OP = 2
COLL_T0 = 3
COLL_BYTES = 4
COLL_GROUP_SIZE = 5
COLL_GROUP_NAME = 6
COLL_BLOCKED_NS = 7
COLL_FACTOR = 8
# the call: its group instance's id ("" unknown; hooks/groups.py:instance) and its number in that instance
# (the group's own count, the same on each of its ranks; -1 unknown)
COLL_GID = 9
COLL_SEQ = 10
COLL_E0 = 11
COLL_E1 = 12

# DATA: the time blocked in a data loader's next()
DATA_T0 = 2
DATA_SAMPLES = 3
DATA_TOKENS = 4

# LOG, DEVICE: {name: value}; a logged value is a float, an int or a PendingValue; DEVICE is a
# device/host reading (the sampler thread)
VALUES = 2

# CHECKPOINT: a save or load. Blocking: the call the training thread waited in; not blocking: an async
# save's upload, appended by the thread that ran it when it ended. CKPT_IO_NS: the rank's own storage time,
# 0 when unknown.
CKPT_KIND = 2  # "save" or "load"
CKPT_T0 = 3
CKPT_BYTES = 4
CKPT_BLOCKING = 5
CKPT_IO_NS = 6

# Names a phase may not take: they are columns of the steps table with another meaning.
RESERVED_PHASES = frozenset({"start", "duration", "comm", "step", "rank"})
