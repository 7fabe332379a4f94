"""What an attribution is made of: one group's change, and the whole decomposition (frozen results).

``profiling.attribution`` computes them, ``profiling.wording`` reads them out.

**The additive frame.** The parts add up to the profiled pass's own change in
wall time per iteration, and that pass is then checked against the change the
gate measured in its timed rounds, a measurement of its own: ``adds_up`` is
false when they differ by more than ``ADDS_UP_SHARE`` of the measured change,
and the explanation says so. Two frames:

- ``"cpu"`` (a host-bound step whose profile carries the process's CPU clock
  per window): self times of the traced ops add up across threads to CPU
  time, which the process's own clock measures apart from the profile. The
  change in CPU time per iteration is the groups' changes, the common factor's
  part and the **untraced CPU** (the clock less the traced self times: Python,
  wrappers, the profiler's own cost); each is turned into wall time through
  the measured parallelism (``rho``, wall seconds per CPU second now). The
  consumer's input wait is wall time already. What is left of the wall-clock
  change is **idle**: time no thread computed (waits, sleeps, I/O, threads
  busy in parallel before and no longer), measured as the wall clock less
  the CPU clock over the busy threads. A group's line gives both its CPU
  change and its share of the step, so a part larger than the step's change
  says why (threads in parallel) in the same line.
- ``"self time"`` (no CPU clock in a profile, or a step paced by the GPU's
  kernels): the parts are self times as before, and what is left of the
  profiled wall change is ``outside`` ops and stages: Python between ops, or,
  when negative, self times overlapping across threads, said as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOST, DEVICE = "host", "device"
CPU_FRAME, SELF_FRAME = "cpu", "self time"
# The parts (they add up to the profiled pass's change) must be within this share of the measured change.
ADDS_UP_SHARE = 0.10
PIPELINE_KINDS = ("stage", "tf.data work")
HOST_OP_KINDS = ("layer", "op")
DEVICE_OP_KINDS = ("device layer", "device op")
# The groups whose self time is CPU time (ops compute; a stage's time includes its wait for the one upstream,
# the consumer's input wait is a wait): the CPU frame turns their change into wall time through the parallelism.
CPU_KINDS = ("layer", "op", "tf.data work", "retracing", "other")


@dataclass(frozen=True, slots=True)
class Change:
    """One group's change in self time per iteration, current minus the common factor x baseline."""

    key: str
    kind: str
    label: str  # the group as read on the current side (the baseline's, for one that vanished)
    how: str  # "appeared", "vanished", "grew", "shrank"
    delta: float  # seconds per iteration of its own time (CPU time for ops, in the CPU frame)
    noise: float  # seconds per iteration: the change its test needed at the level it was held to
    base: float
    current: float
    base_per_element: float | None = None
    current_per_element: float | None = None
    base_parallel: bool | None = None
    current_parallel: bool | None = None
    significant: bool = False  # beyond chance, Holm over every group compared (``noise.FAMILY_ALPHA``)
    p: float = 1.0
    wall: float | None = None  # its part of the step's wall time per iteration (None: not on the additive path)
    below_cutoff: bool = False  # absent from one side's top groups while that side left groups out: it may be there
    # Tested across pairs of processes: the change they read, seconds per iteration at this pair's level. ``noise``
    # is that test's; ``delta`` stays the first pair's own change, the additive part.
    across: float | None = None
    across_pairs: int = 0  # how many pairs of processes that test read (those where the group was traced)
    se: float = 0.0  # the standard error of the change its test judged (``tested``), seconds per iteration

    @property
    def tested(self) -> float:
        """The change its test judged (``across`` where it was tested across pairs of processes)."""
        return self.across if self.across is not None else self.delta

    @property
    def beyond_noise(self) -> bool:
        return self.significant


@dataclass(frozen=True, slots=True)
class Attribution:
    """The decomposition: ``explained + drift + input_drift + remainder == profiled``, checked against
    ``measured`` (``adds_up``)."""

    measured: float  # seconds per iteration, from the gate
    profiled: float  # the profiled passes' own change in wall time per iteration
    profiled_noise: float  # the change the profiled pass needed to be beyond chance (95%, two-sided)
    causes: tuple[Change, ...]  # beyond their noise, listed (at most ``limit``)
    unlisted: tuple[Change, ...]  # beyond their noise but past the limit: part of the remainder
    within_noise: int  # groups compared that did not move beyond their noise
    remainder: float
    input_wait: Change | None  # the consumer's time blocked on tf.data, when either side waited for input
    paced_by: Change | None = None  # the stage behind a moved input wait
    scale: float = 1.0  # the common factor the untouched groups moved by (``noise.common_factor``)
    drift: float = 0.0  # seconds per iteration of wall time that factor accounts for: an additive part of its own
    pipeline: tuple[Change, ...] = ()  # tf.data stages and function work beyond noise, largest own change first
    base_logdir: str | None = None
    current_logdir: str | None = None
    # The remainder, split (they add up to it): groups within their noise, moved but unlisted, and
    within_noise_delta: float = 0.0  # the groups on the step's path that did not move beyond their noise (wall)
    outside: float = 0.0  # self-time frame: the profiled change outside any op or stage (negative: thread overlap)
    timed_vs_profiled: float = 0.0  # the measured change minus the profiled pass's own: what ``adds_up`` checks
    reshaped: tuple[Change, ...] = ()  # stages parallel on one side, sequential on the other (a fact, not a test)
    # Every current window slower than every baseline window (scaled by the common factor): a rank test of
    # the profiled pass's slowdown that one wild window cannot hide.
    windows_separated: bool = False
    input_drift: float = 0.0  # the consumer's wait moved with nothing behind it: the pipeline slower as a whole
    path: str = HOST
    off_path: tuple[Change, ...] = ()
    device_busy: Change | None = None
    frame: str = SELF_FRAME
    rho: float = 1.0  # wall seconds per CPU second on the current side (CPU frame)
    busy_threads: tuple[float, float] = (1.0, 1.0)  # CPU over wall, baseline and current (CPU frame)
    untraced: float = 0.0  # CPU frame: the change in CPU time no traced op accounts for, as wall time
    idle: float = 0.0  # CPU frame: the change in wall time no thread computed (waits, lost parallelism)
    pipeline_cpu: float = 0.0  # CPU frame: tf.data functions' CPU time (on tf.data's threads), as wall time
    overtraced: bool = False  # the traced self times exceed the process's CPU clock: some events wait, not compute
    detectable: float = 0.0  # the largest change any step-path group needed to be seen (the weakest test)
    groups_tested: int = 0
    same_session: bool = False  # both sides in one profiler session, windows alternating
    tau: float = 0.0  # the groups' spread between the sides beyond their windows' (``noise.Factor.tau``)
    factor_groups: int = 0  # the untouched groups the common factor was read from
    step: float = 0.0  # the baseline's wall time per iteration in the profiled pass (what "% of the step" reads)
    profiled_moved: bool = False  # the profiled pass's wall change beyond chance (or every window separated)
    pairs: int = 1  # pairs of processes the op groups were tested across (``attribute``'s ``replicates``)
    # With nothing on the step's path beyond its noise while the step moved: the groups whose change went the
    # measured change's way by more than one standard error, most likely first (``attribution._leads``). Not
    # causes: none passed its test.
    leads: tuple[Change, ...] = ()
    # tf.data stages either profile traced: their own work (dispatching, copying, batching elements) is time
    # outside every op and tf.data function, so with a pipeline that time is not only Python's.
    stages: int = 0

    @property
    def unlisted_delta(self) -> float:
        return math.fsum(_wall(c) for c in self.unlisted)

    @property
    def explained(self) -> float:
        return math.fsum(_wall(c) for c in self.causes)

    @property
    def adds_up(self) -> bool:
        """The parts (which add up to the profiled pass's change) are within ADDS_UP_SHARE of the measured one."""
        return abs(self.timed_vs_profiled) <= ADDS_UP_SHARE * abs(self.measured)

    @property
    def input_factor(self) -> float:
        """The consumer's wait, current over baseline, when it is the ``input_drift`` (1 otherwise)."""
        if not self.input_drift or self.input_wait is None or self.input_wait.base <= 0.0:
            return 1.0
        return self.input_wait.current / (self.scale * self.input_wait.base)

    @property
    def nothing_moved(self) -> bool:
        """No op, layer, stage, tf.data work or kernel moved beyond its noise."""
        return not self.causes and not self.unlisted and not self.pipeline and not self.off_path

    @property
    def top(self) -> Change | None:
        """The cause to name first: the consumer's input wait is a symptom, so the stage behind it is named instead;
        with nothing on the step's path beyond its noise, the tf.data stage whose own change is largest."""
        if not self.causes:
            if self.pipeline:
                return self.pipeline[0]
            return self.off_path[0] if self.off_path else None
        first = self.causes[0]
        if first.kind == "input wait" and self.paced_by is not None:
            return self.paced_by
        return first


def _wall(change: Change) -> float:
    return change.wall if change.wall is not None else change.delta
