"""The tuples the hot path appends to the recorder's buffer, and what each field holds.

Timestamps are ``time.perf_counter_ns()`` integers; the pipeline turns them into epoch seconds.
Every event's second field is the time it was appended, so the buffer is in time order for one
thread. Layouts (index: meaning):

STEP_BEGIN  (0, t_begin, index)
STEP_END    (1, t_end, index, t_begin, ok, tokens, samples)
PHASE       (2, t_end, name, t_begin, ok)
COLLECTIVE  (3, t_end, op, t_begin, nbytes, group_size, group_name, blocked_ns, busbw_factor)
DATA        (4, t_end, t_begin, samples, tokens)          time blocked in a data loader's next()
LOG         (5, t, {name: value})                        value: float, int or a PendingValue
DEVICE      (6, t, {name: value})                        a device/host reading (sampler thread)
"""

STEP_BEGIN = 0
STEP_END = 1
PHASE = 2
COLLECTIVE = 3
DATA = 4
LOG = 5
DEVICE = 6

# Names a phase may not take: they are columns of the steps table with another meaning.
RESERVED_PHASES = frozenset({"start", "duration", "comm", "step", "rank"})
