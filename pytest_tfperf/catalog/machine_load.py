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
