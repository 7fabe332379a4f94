"""How much CPU other processes used while the catalog measured: a busy machine cannot show parallelism.

Interleaving makes most anti/fix ratios fair on a shared machine: a slow
spell hits both variants. Not so for a scenario whose whole effect is using
more cores (thread starvation): if other processes hold a core, the fix has
none to gain. This reads the system's busy CPU time and subtracts this
process's and its children's (worker processes included), so a scenario can
say "the machine was busy" instead of failing for a reason that is not its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType


def system_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot, all cores together."""
    import psutil

    t = psutil.cpu_times()
    # Linux counts guest time inside user time already; psutil reports it again on its own.
    not_busy = t.idle + sum(getattr(t, f, 0.0) for f in ("iowait", "guest", "guest_nice"))
    return float(sum(t) - not_busy)


def own_cpu_s() -> float:
    """CPU seconds of this process and all its children, live or finished."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    # children_* hold the children already waited for; live ones are read below.
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # exited between the listing and the reading
            continue
    return float(total)


class OtherLoad:
    """``with OtherLoad() as load: ...`` then ``load.cores`` = average cores used by other processes."""

    def __init__(self) -> None:
        self.cores = 0.0
        self._start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __enter__(self) -> OtherLoad:
        self._start = (time.monotonic(), system_busy_s(), own_cpu_s())
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        wall = time.monotonic() - self._start[0]
        busy = system_busy_s() - self._start[1]
        own = own_cpu_s() - self._start[2]
        self.cores = max(0.0, (busy - own) / wall) if wall > 0 else 0.0


def idle_cpu_s() -> float:
    """CPU seconds the whole machine has left idle since boot, all cores together."""
    import psutil

    t = psutil.cpu_times()
    return float(t.idle + getattr(t, "iowait", 0.0))


@dataclass(frozen=True, slots=True)
class CoreUse:
    """What a variant's process got of the machine inside its own calls (warm-up and timed rounds).

    ``cpu_s`` is the CPU time of the variant's whole process (all its threads)
    and ``idle_s`` the CPU time the machine left idle, both summed over the
    calls, so ``cores`` is how many cores the variant actually used and
    ``idle_cores`` how many more it could have had.
    """

    calls: int
    wall_s: float
    cpu_s: float
    idle_s: float

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def idle_cores(self) -> float:
        return self.idle_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "wall_s": round(self.wall_s, 4), "cores": round(self.cores, 3),
                "idle_cores": round(self.idle_cores, 3)}


class CallAccount:
    """``CallAccount(run)`` is ``run`` that also sums the wall, own-CPU and machine-idle time of its calls.

    Read around each call: two clock reads and one of the machine's CPU
    counters (tens of microseconds, against the tens to hundreds of
    milliseconds an iteration of the scenarios that use it takes, and the same
    for each variant).
    """

    def __init__(self, run: Callable[[], object], *, clock: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.process_time, idle: Callable[[], float] | None = None) -> None:
        self._run, self._clock, self._cpu = run, clock, cpu
        self._idle = idle if idle is not None else idle_cpu_s
        self._calls = 0
        self._wall = self._cpu_s = self._idle_s = 0.0

    def __call__(self) -> object:
        idle0, cpu0, t0 = self._idle(), self._cpu(), self._clock()
        try:
            return self._run()
        finally:
            t1, cpu1, idle1 = self._clock(), self._cpu(), self._idle()
            self._calls += 1
            self._wall += t1 - t0
            self._cpu_s += cpu1 - cpu0
            self._idle_s += idle1 - idle0

    def use(self) -> CoreUse:
        return CoreUse(self._calls, self._wall, self._cpu_s, self._idle_s)


def cores_withheld(fix: CoreUse | None, needed: float) -> str:
    """Why the machine could not give the fix the ``needed`` cores in its calls; "" when it could or nothing is known.

    The fix got them (``cores >= needed``): a miss is the fix's own. It did
    not, but the machine left enough idle that it could have: a fix that no
    longer uses its cores (a regression) fails. Only a fix short of cores on a
    machine with none idle to give is excused.
    """
    if fix is None or fix.wall_s <= 0 or fix.calls == 0:
        return ""
    if fix.cores >= needed or fix.cores + fix.idle_cores >= needed:
        return ""
    return (f"the fix got {fix.cores:.2f} cores in its calls and the machine had {fix.idle_cores:.2f} idle, "
            f"short of the {needed:g} its gain needs")


def busy_machine_reason(*, needed_cores: float, other_cores: float, busy_above: float,
                        fix: CoreUse | None) -> str:
    """The same-run reason that an idle-cores effect cannot be judged here, or "" when it can.

    Two checks, either suffices: other processes used more than ``busy_above``
    cores on average over the whole scenario (``OtherLoad``), or within the
    fix's own calls the fix got fewer cores than its gain needs while the
    machine had none idle to give (``cores_withheld``). The second sees what the
    first averages away: load that falls on the fix's calls, and load by
    processes outside this one's view (other containers, the hypervisor's steal).
    """
    reasons = []
    if other_cores > busy_above:
        reasons.append(f"other processes used {other_cores:.1f} cores while it was measured")
    withheld = cores_withheld(fix, needed_cores)
    if withheld:
        reasons.append(withheld)
    return "; ".join(reasons)
