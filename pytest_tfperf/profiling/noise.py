"""The noise model of the attribution: each window's load taken out, the common factor, and the per-group tests.

Three ideas, apart from the ranking and the wording (``profiling.attribution``,
``profiling.wording``):

- **Steadying** (``steadied``): each window's group times scaled by the side's
  mean load over that window's load, the load read from the groups both sides
  have, so one busy window does not swell every group's spread.
- **The common factor** (``common_factor``): every group moved by the same
  factor (a slower process, or a change that touches every op) is read from
  the groups the change did not touch. The log-ratios current/baseline of the
  groups both sides ran in every window are taken, those farther from their
  median than 3 robust standard deviations (1.4826 x MAD, the textbook rule,
  not a figure tuned here) are left out as touched, and the factor is the
  median of the rest. It is used only when it differs from 1 beyond its own
  standard error (a t test at ``FACTOR_ALPHA``); otherwise it is 1. The same
  untouched groups say how much groups differ between the sides beyond what
  their windows show (``tau``: the spread of their log-ratios beyond what
  the windows explain): two processes, or two builds of the same model,
  differ group by group more than windows of one process do.
- **Per-group tests, with a family-wise rate** (``group_test``, ``holm``): a
  group's change (current minus factor x baseline) over its standard error
  (Welch's, from the windows, plus ``tau`` of its level) is a t statistic,
  with Welch-Satterthwaite degrees of freedom. Every group compared is one
  test; Holm's step-down procedure over all of them keeps the chance that
  any group of unchanged code is blamed at most ``FAMILY_ALPHA`` per
  comparison, whatever the number of groups (under the model: windows
  independent and near normal after steadying). A group that may hide below
  a side's cut-off (its "other") has its change shrunk towards zero by that
  amount before the test: the worst case of what is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from pytest_tfperf.profiling.profile_model import Group, Profile
from pytest_tfperf.stats import mean, normal_quantile, t_cdf, t_quantile, variance

# The chance, per comparison, that unchanged code has any group blamed (Holm over every group compared).
FAMILY_ALPHA = 0.05
# The common factor is stated only when it differs from 1 beyond chance at this level (one test).
FACTOR_ALPHA = 0.05
# Groups smaller than this share of the step on average over the two sides are not tested (they cannot matter to
# the step, and each test in the family costs every other one power: independent filtering, Bourgon et al. 2010 -
# the groups' size, the sides' sum, says nothing of their difference under the null).
RELEVANT_SHARE = 0.005
# Robust outlier rule for the groups the change touched: |log-ratio - median| > OUTLIER_MADS x 1.4826 x MAD.
OUTLIER_MADS = 3.0
MAD_TO_SD = 1.4826
ROUNDING = 1e-9  # log-ratios closer than this are equal (floating-point rounding of steadied windows)
# Take each window's load out of its groups before comparing (``steadied``).
STEADY_WINDOWS = True
# Steadying reads a window's load from the groups both sides have, each at least this share of the step,
# and needs two of them (a group's load leaves the group itself out).
STEADY_GROUP_SHARE = 0.005
STEADY_MIN_GROUPS = 2
# The common factor needs this many untouched groups: with fewer, one touched group could be the median.
FACTOR_MIN_GROUPS = 3
OP_KINDS = ("layer", "op", "tf.data work")
HOST_OP_KINDS = ("layer", "op")
DEVICE_OP_KINDS = ("device layer", "device op")


@dataclass(frozen=True, slots=True)
class Factor:
    """The common factor and what it was read from."""

    scale: float = 1.0  # current / baseline of the untouched groups (1 when not beyond chance or not readable)
    tau: float = 0.0  # relative spread of a group between the sides beyond its windows' (log scale)
    tau_df: float = math.inf  # the degrees of freedom of that estimate
    groups: int = 0  # untouched groups it was read from
    touched: int = 0  # groups left out as outliers (touched by the change)
    estimate: float = 1.0  # the median before the test against 1


@dataclass(frozen=True, slots=True)
class Test:
    """One group's change and its test: ``delta`` over ``se`` with ``df`` degrees of freedom."""

    delta: float  # current mean - scale x baseline mean, seconds per iteration
    shrunk: float  # ``delta`` less what may hide below a side's cut-off (towards zero), what is tested
    se: float
    df: float
    hidden: float
    # A group absent from one side can only have grown (appeared) or shrunk (vanished): one direction is
    # possible, so its test is one-sided in that direction.
    sides: int = 2
    tested: bool = True  # False: too small to matter, left out of the family (``RELEVANT_SHARE``)
    # Tested across pairs of processes (``replicate_tests``): the change those pairs read, in seconds at this
    # pair's level, which is what ``shrunk`` and ``se`` test (``delta`` stays this pair's, the additive part).
    across: float | None = None
    pairs: int = 0  # the pairs of processes it was tested across (0: within one pair)

    @property
    def p(self) -> float:
        """The p-value of ``shrunk`` (1 when it is not tested or cannot be: nothing to read a spread from)."""
        if self.shrunk == 0.0 or not self.tested:
            return 1.0
        if self.se <= 0.0:
            return 0.0  # no spread at all on either side: any change is beyond it
        return self.sides * (1.0 - t_cdf(abs(self.shrunk) / self.se, self.df))

    def threshold(self, alpha: float) -> float:
        """The smallest change this group's test would have called beyond chance at ``alpha``."""
        if self.se <= 0.0:
            return self.hidden
        return quantile(1.0 - alpha / self.sides, self.df) * self.se + self.hidden


def quantile(p: float, df: float) -> float:
    """Student's t quantile by Newton's method from the normal one (a few steps; every group's test needs two),
    ``stats.t_quantile``'s bisection when it does not settle."""
    if math.isinf(df):
        return normal_quantile(p)
    x = normal_quantile(p)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(50):
        density = math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))
        step = (t_cdf(x, df) - p) / density
        x -= step
        if abs(step) < 1e-10 * max(1.0, abs(x)):
            return x
    return t_quantile(p, df)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


@dataclass(frozen=True, slots=True)
class Prior:
    """What the op groups' window spreads say together (an empirical-Bayes prior, Smyth 2004, limma's moderated
    t): a group's relative variance is about ``s0sq``, as sure as ``d0`` degrees of freedom. Five windows give
    a group's own spread 4 degrees of freedom, so its test needs t > 8.6 among 40 groups; shrunk towards what
    the other groups show, it needs far less, and a group that truly is noisier keeps most of its own spread
    when the groups' spreads differ (``d0`` small)."""

    s0sq: float
    d0: float


def window_part(base: Sequence[float], current: Sequence[float], scale: float) -> tuple[float, float]:
    """The variance of current minus ``scale`` x baseline from the windows, and its Welch degrees of freedom."""
    a = scale * scale * variance(base) / len(base) if base else 0.0
    c = variance(current) / len(current) if current else 0.0
    if len(base) < 2 or len(current) < 2:
        return a + c, 1.0  # a side of one window says nothing about its spread: the widest t
    denominator = (a * a / (len(base) - 1) if a else 0.0) + (c * c / (len(current) - 1) if c else 0.0)
    return a + c, ((a + c) ** 2 / denominator if denominator > 0.0 else math.inf)


def prior(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], scale: float) -> Prior | None:
    """``Prior`` from the (baseline, current) windows of the groups both sides have (Smyth's moment estimates
    on log variances); None with fewer than three groups to read it from."""
    e: list[float] = []
    tri: list[float] = []
    for b, c in pairs:
        w, d = window_part(b, c, scale)
        level = max(abs(scale * mean(b)), abs(mean(c)))
        if w <= 0.0 or level <= 0.0 or not math.isfinite(d):
            continue
        e.append(math.log(w / level ** 2) - _digamma(d / 2) + math.log(d / 2))
        tri.append(_trigamma(d / 2))
    return _fit_prior(e, tri)


def _fit_prior(e: Sequence[float], tri: Sequence[float]) -> Prior | None:
    """Smyth's moment estimates from each group's ``log variance - digamma(d/2) + log(d/2)`` and ``trigamma(d/2)``."""
    if len(e) < 3:
        return None
    centre = mean(e)
    spread = math.fsum((v - centre) ** 2 for v in e) / (len(e) - 1) - mean(tri)
    if spread <= 0.0:
        return Prior(s0sq=math.exp(centre), d0=math.inf)
    d0 = 2.0 * _trigamma_inverse(spread)
    return Prior(s0sq=math.exp(centre + _digamma(d0 / 2) - math.log(d0 / 2)), d0=d0)


def _digamma(x: float) -> float:
    out = 0.0
    while x < 6.0:
        out -= 1.0 / x
        x += 1.0
    x2 = 1.0 / (x * x)
    return out + math.log(x) - 0.5 / x - x2 * (1 / 12 - x2 * (1 / 120 - x2 / 252))


def _trigamma(x: float) -> float:
    out = 0.0
    while x < 6.0:
        out += 1.0 / (x * x)
        x += 1.0
    x2 = 1.0 / (x * x)
    return out + 1.0 / x + x2 / 2 + x2 / x * (1 / 6 - x2 * (1 / 30 - x2 / 42))


def _trigamma_inverse(y: float) -> float:
    lo, hi = 1e-8, 1e8  # trigamma falls from there to there
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _trigamma(mid) > y else (lo, mid)
    return math.sqrt(lo * hi)


def group_test(base: Sequence[float], current: Sequence[float], scale: float = 1.0, *, tau: float = 0.0,
               tau_df: float = math.inf, hidden: float = 0.0, shrink: Prior | None = None) -> Test:
    """Welch's t for current minus ``scale`` x baseline, its window variance moderated by ``shrink`` (the other
    groups' spreads), with ``tau`` of the group's level added to its variance."""
    mb, mc = mean(base), mean(current)
    delta = mc - scale * mb
    level = max(abs(scale * mb), abs(mc))
    window, d = window_part(base, current, scale)
    if shrink is not None and level > 0.0 and len(base) > 1 and len(current) > 1:
        if math.isinf(shrink.d0):
            window, d = shrink.s0sq * level ** 2, math.inf
        elif math.isfinite(d):
            window = (shrink.d0 * shrink.s0sq * level ** 2 + d * window) / (shrink.d0 + d)
            d = shrink.d0 + d
    extra = (tau * level) ** 2
    total = window + extra
    denominator = (window * window / d if window and math.isfinite(d) else 0.0) \
        + (extra * extra / tau_df if extra and math.isfinite(tau_df) else 0.0)
    df = total * total / denominator if denominator > 0.0 else math.inf
    if len(base) < 2 or len(current) < 2:
        df = 1.0
    shrunk = math.copysign(max(0.0, abs(delta) - hidden), delta) if hidden else delta
    return Test(delta=delta, shrunk=shrunk, se=math.sqrt(total), df=df, hidden=hidden)


def replicate_tests(logs: Mapping[str, Sequence[float]], levels: Mapping[str, float] | None = None
                    ) -> dict[str, Test]:
    """Each group's change tested across independent pairs of processes (``logs``: per group, its log-ratio
    current over baseline in each pair, the pair's common factor taken out), in relative units (multiply by
    a level for seconds).

    One pair of processes cannot tell a group's own between-process spread from a change: two processes differ
    group by group (thread placement, memory layout) for as long as they live. Each pair is one draw of that
    spread, so the pairs' log-ratios have it in their variance; the test is the mean log-ratio over its
    standard error, with ``d0 + pairs - 1`` degrees of freedom, the variance moderated by what every group's
    pairs show together (Smyth 2004: three pairs give a group's own variance 2 degrees of freedom). A small
    group spreads more, relatively, than a large one, so the prior's variance follows the group's size
    (``levels``, its time per iteration: limma's trend, a line in log variance over log size) rather than
    lending a small group the calm of the large ones. Groups with fewer than two pairs are left out (the
    caller keeps their one-pair test)."""
    usable = {k: v for k, v in logs.items() if len(v) >= 2}
    points: list[tuple[float, float, float]] = []  # (log size, adjusted log variance, its trigamma)
    for k, v in usable.items():
        d = len(v) - 1
        s2 = variance(v)
        size = (levels or {}).get(k, 1.0)
        if s2 > ROUNDING ** 2 and size > 0.0:
            points.append((math.log(size), math.log(s2) - _digamma(d / 2) + math.log(d / 2), _trigamma(d / 2)))
    trend = _trend([x for x, _, _ in points], [e for _, e, _ in points]) if levels else (lambda _: 0.0)
    shrink = _fit_prior([e - trend(x) for x, e, _ in points], [t for _, _, t in points])
    if shrink is not None:
        # The prior is itself read from the groups: no surer than their pooled degrees of freedom (less the
        # line's), however alike their spreads look (Smyth's d0 is infinite then, as if it were known).
        pooled = float(sum(len(v) - 1 for v in usable.values()) - (2 if levels else 1))
        shrink = Prior(s0sq=shrink.s0sq, d0=max(1.0, min(shrink.d0, pooled)))
    out: dict[str, Test] = {}
    for key, v in usable.items():
        n, d = len(v), len(v) - 1
        s2 = variance(v)
        if shrink is not None:
            # the prior's variance at this group's size: the fitted line moves the intercept ``s0sq`` holds
            shift = math.exp(trend(math.log((levels or {}).get(key, 1.0) or 1.0)))
            if math.isinf(shrink.d0):
                s2, df = shrink.s0sq * shift, math.inf
            else:
                s2, df = (shrink.d0 * shrink.s0sq * shift + d * s2) / (shrink.d0 + d), shrink.d0 + d
        elif s2 > ROUNDING ** 2:  # closer than rounding: the pairs agree exactly
            df = float(d)
        else:
            continue  # pairs that agree exactly, and no other group to lend a spread: no test to make here
        m = mean(v)
        out[key] = Test(delta=m, shrunk=m, se=math.sqrt(s2 / n), df=df, hidden=0.0)
    return out


def _trend(x: Sequence[float], y: Sequence[float]) -> Callable[[float], float]:
    """The least-squares line of ``y`` over ``x`` (flat at 0 with fewer than four points or no spread in
    ``x``): what is left of ``y`` after it is centred for ``_fit_prior``."""
    if len(x) < 4 or variance(x) <= 0.0:
        return lambda _: 0.0
    mx, my = mean(x), mean(y)
    slope = math.fsum((a - mx) * (b - my) for a, b in zip(x, y)) / math.fsum((a - mx) ** 2 for a in x)
    return lambda v: slope * (v - mx)  # centred: the prior's own intercept (``s0sq``) carries ``my``


def holm(p_values: Sequence[float], alpha: float = FAMILY_ALPHA) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure: which hypotheses are rejected, and the level each one was held to."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = [False] * m
    levels = [alpha / m if m else alpha] * m
    going = True
    for rank, i in enumerate(order):
        levels[i] = alpha / (m - rank)
        if going and p_values[i] <= levels[i]:
            rejected[i] = True
        else:
            going = False
    return rejected, levels


def within_cpu(profile: Profile, cpu_kinds: Sequence[str]) -> Profile:
    """Each window's op groups (and "other") scaled down to the process's CPU clock where their self times add
    up to more than it: a thread preempted inside an op (a loaded machine: 2 cores, 6 runnable processes) still
    has the op's event open, so its duration counts time the op did not compute. Self times cannot exceed the
    CPU time of the threads that ran them; where they do, the excess is taken out of every op of the window in
    proportion (which ops were preempted is not recorded). Windows within the clock, and profiles without it,
    are left as they are."""
    if len(profile.cpu) != profile.windows:
        return profile
    members = [g for g in profile.groups if g.kind in cpu_kinds and not g.on_device]
    factors = []
    for w in range(profile.windows):
        traced = math.fsum(g.per_window[w] for g in members) + profile.other[w]
        factors.append(min(1.0, profile.cpu[w] / traced) if traced > 0.0 else 1.0)
    if all(f == 1.0 for f in factors):
        return profile

    def scaled(values: Sequence[float]) -> tuple[float, ...]:
        return tuple(v * f for v, f in zip(values, factors))

    groups = tuple(replace(g, per_window=scaled(g.per_window)) if g in members else g for g in profile.groups)
    return replace(profile, groups=groups, other=scaled(profile.other))


def common_keys(base: Profile, current: Profile, device: bool = False) -> list[str]:
    """The layer and op groups (the device's kernel groups with ``device``) both sides have, each at least
    STEADY_GROUP_SHARE of the step on both."""
    floor = STEADY_GROUP_SHARE * base.wall_mean
    kinds = DEVICE_OP_KINDS if device else HOST_OP_KINDS
    return [g.key for g in base.groups if g.kind in kinds and (o := current.group(g.key)) is not None
            and g.mean > floor and o.mean > floor]


def steadied(base: Profile, current: Profile, device: bool = False) -> tuple[Profile, Profile]:
    """Each side's windows with its window-to-window load taken out; the side's level is kept (comparing the
    sides is the common factor's job). With ``device`` the device's kernel groups, else the host's."""
    keys = common_keys(base, current, device)
    if len(keys) < STEADY_MIN_GROUPS:
        return base, current
    return _steady(base, keys, device), _steady(current, keys, device)


def _steady(profile: Profile, keys: Sequence[str], device: bool = False) -> Profile:
    k = profile.windows
    members = {key: profile.group(key) for key in keys}
    load = [math.fsum(g.per_window[w] for g in members.values() if g is not None) for w in range(k)]
    if min(load) <= 0.0:
        return profile

    def steady(values: Sequence[float], own: Sequence[float] | None) -> tuple[float, ...]:
        rest = [load[w] - (own[w] if own is not None else 0.0) for w in range(k)]
        if min(rest) <= 0.0:
            return tuple(values)
        level = math.fsum(rest) / k
        return tuple(values[w] * level / rest[w] for w in range(k))

    groups = tuple(replace(g, per_window=steady(g.per_window, g.per_window if g.key in members else None))
                   if g.on_device == device else g for g in profile.groups)
    if device:
        return replace(profile, groups=groups,
                       device_other=steady(profile.device_other, None) if profile.device_other else ())
    return replace(profile, groups=groups, other=steady(profile.other, None))


def common_factor(base: Profile, current: Profile, device: bool = False) -> Factor:
    """The factor the untouched groups moved by together, and their spread between the sides (see the module)."""
    kinds = DEVICE_OP_KINDS if device else OP_KINDS
    logs: list[float] = []
    se2: list[float] = []
    for g in base.groups:
        o = current.group(g.key)
        if g.kind not in kinds or o is None or min(g.per_window) <= 0.0 or min(o.per_window) <= 0.0:
            continue
        logs.append(math.log(o.mean / g.mean))
        se2.append(variance(g.per_window) / len(g.per_window) / g.mean ** 2
                   + variance(o.per_window) / len(o.per_window) / o.mean ** 2)
    if len(logs) < FACTOR_MIN_GROUPS:
        return Factor()
    centre = median(logs)
    spread = MAD_TO_SD * median([abs(v - centre) for v in logs])
    # a group within its own windows' noise of the median is not an outlier, however alike the others are
    kept = [i for i, v in enumerate(logs) if abs(v - centre) <= OUTLIER_MADS * max(spread, math.sqrt(se2[i]), ROUNDING)]
    if len(kept) < FACTOR_MIN_GROUPS:
        return Factor(touched=len(logs) - len(kept))
    untouched = [logs[i] for i in kept]
    estimate = median(untouched)
    tau = _spread_beyond_windows(untouched, [se2[i] for i in kept], estimate)
    # the factor's own standard error: the untouched groups' spread over their number (a mean's, a little
    # optimistic for a median); each group's windows and ``tau`` both scatter them
    sd = math.sqrt(variance(untouched)) if len(untouched) > 1 else 0.0
    n = len(untouched)
    if sd > 0.0:
        p = 2.0 * (1.0 - t_cdf(abs(mean(untouched)) / (sd / math.sqrt(n)), n - 1))
        significant = p <= FACTOR_ALPHA and abs(estimate) > 0.0
    else:
        significant = estimate != 0.0
    scale = math.exp(estimate) if significant else 1.0
    return Factor(scale=scale, tau=tau, tau_df=max(1.0, n - 1.0), groups=n, touched=len(logs) - n, estimate=math.exp(estimate))


def _spread_beyond_windows(logs: Sequence[float], se2: Sequence[float], centre: float) -> float:
    """The ``tau`` with which the untouched groups' log-ratios, each over its own standard error
    ``sqrt(se2 + tau^2)``, have a mean square of 1 (the Paule-Mandel estimate of a between-study variance: the
    groups touched were left out before, by the MAD): 0 when the windows explain the spread already."""
    def spread(tau: float) -> float:
        z = [(v - centre) / math.sqrt(s + tau * tau) if s + tau * tau > 0.0 else 0.0 for v, s in zip(logs, se2)]
        return math.sqrt(math.fsum(v * v for v in z) / max(1, len(z) - 1))

    if spread(0.0) <= 1.0:
        return 0.0
    lo, hi = 0.0, max(abs(v - centre) for v in logs) + 1e-12
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if spread(mid) > 1.0 else (lo, mid)
    return hi


# At host tracer level 2 TensorFlow's executor traces an op only while its cost model deems it expensive, and the
# estimate follows the op's measured time: an op of a few microseconds is traced in some windows and processes and
# not in others (a 6 us DecodeCSV in every window of one process, in none of another). A group of such short ops
# present on both sides but missing from some windows, or traced as TRACED_COUNT_RATIO times the events on one
# side, was not measured there: the worst case (its whole size) is added to what may hide (``traced_in_part``).
SHORT_EVENT_S = 20e-6
TRACED_COUNT_RATIO = 4.0
WHOLE_EVENTS_TOLERANCE = 1e-3


def traced_in_part(b: Group | None, c: Group | None, short_event_s: float = SHORT_EVENT_S,
                   count_ratio: float = TRACED_COUNT_RATIO, whole_tolerance: float = WHOLE_EVENTS_TOLERANCE) -> bool:
    """Short ops present on both sides but missing from some of a side's windows, or traced as far fewer events
    an iteration on one side than on the other: TensorFlow's host tracer (level 2) traces an op only while its
    cost model deems it expensive, so their change was not measured. A group absent from a side entirely is
    compared like any other (a new group of short ops is a change users make), when the process's CPU clock
    moved with it (``attribution``); else it is one of these."""
    if b is None or c is None or b.kind not in OP_KINDS:
        return False
    if not any(g.per_event is not None and g.per_event < short_event_s for g in (b, c)):
        return False
    if any(v <= 0.0 for g in (b, c) for v in g.per_window):
        return True
    if not b.per_event or not c.per_event:
        return False
    # The side traced as more events must be the one of short events: ops that grew cross the cost threshold and
    # are traced as more events too (an LSTM widened 5x: 22 events of 18 us an iteration, then 366 of 42 us).
    many, few = (b, c) if b.mean / b.per_event > c.mean / c.per_event else (c, b)
    # ...and code that runs more ops (64 eager Identity ops a row instead of one) has them all traced: a whole
    # number of events every iteration. A fraction says TensorFlow traced some of them and not others.
    if many.events is not None and abs(many.events - round(many.events)) < whole_tolerance:
        return False
    return many.per_event < short_event_s and many.per_event <= few.per_event \
        and many.mean / many.per_event > count_ratio * (few.mean / few.per_event)
