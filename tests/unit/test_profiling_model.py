"""The compact profile: small, JSON-serialisable, versioned, and refusing forms it does not know."""

from __future__ import annotations

import json

import pytest

from pytest_tfperf.profiling.profile_model import FORMAT_VERSION, Group, Profile, ProfileFormatError


def make_profile(groups: int = 3, windows: int = 5) -> Profile:
    built = tuple(
        Group(key=f"layer:model/layer_{chr(97 + i)}", kind="layer", label=f"layer_{chr(97 + i)}",
              families=("Conv2D", "BiasAdd"), per_window=tuple(1e-3 * (i + 1) + 1e-6 * w for w in range(windows)))
        for i in range(groups))
    built = (Group(**{**{f: getattr(built[0], f) for f in Group.__slots__}, "per_event": 12.5e-6, "events": 64.0}),) + built[1:]
    stage = Group(key="stage:Prefetch/Map", kind="stage", label="Prefetch/Map", families=(),
                  per_window=(2e-3,) * windows, per_element=5e-4, parallel=True,
                  functions=("ResizeBilinear", "Cast"))
    return Profile(name="t", iterations=10, wall=(0.01,) * windows, groups=built + (stage,),
                   other=(1e-4,) * windows, smallest_kept=1e-3, input_wait=(0.0,) * windows, elements=1.0,
                   logdir="/tmp/logs")


def test_round_trip_through_json_keeps_every_field_to_the_stored_precision() -> None:
    profile = make_profile()
    again = Profile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again.name == profile.name and again.iterations == 10 and again.windows == 5
    assert again.logdir == "/tmp/logs" and again.elements == 1.0
    for a, b in zip(again.groups, profile.groups):
        assert (a.key, a.kind, a.label, a.families, a.parallel) == (b.key, b.kind, b.label, b.families, b.parallel)
        assert a.per_window == pytest.approx(b.per_window, abs=1e-7)
    assert again.group("stage:Prefetch/Map").per_element == pytest.approx(5e-4)
    assert again.groups[0].per_event == pytest.approx(12.5e-6) and again.groups[1].per_event is None
    assert again.groups[0].events == 64.0 and again.groups[1].events is None
    assert again.group("stage:Prefetch/Map").functions == ("ResizeBilinear", "Cast")
    assert again.groups[0].functions is None
    assert again.stages()[0].describe() == "Prefetch/Map (tf.data stage, parallel)"
    assert again.groups[0].describe() == "layer_a (Conv2D family)"


def test_a_profile_stored_before_per_event_was_recorded_still_reads() -> None:
    stored = make_profile().to_dict()
    for g in stored["groups"]:
        g.pop("per_event", None)
        g.pop("events", None)
        g.pop("functions", None)
    assert all(g.per_event is None and g.functions is None for g in Profile.from_dict(stored).groups)


def test_forty_groups_of_ten_windows_stay_well_under_twenty_kb() -> None:
    size = len(json.dumps(make_profile(groups=40, windows=10).to_dict()))
    assert size < 20_000


@pytest.mark.parametrize("version", [None, 0, FORMAT_VERSION + 1, "1"])
def test_another_version_is_refused_not_guessed(version: object) -> None:
    data = make_profile().to_dict()
    data["version"] = version
    with pytest.raises(ProfileFormatError, match="version"):
        Profile.from_dict(data)


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("wall"),
    lambda d: d["groups"][0].update(per_window=[1.0]),
    lambda d: d["groups"][0].update(kind="mystery"),
    lambda d: d.update(other=[1.0]),
    lambda d: d["groups"][0].update(per_window=["nan"] * 5),
])
def test_a_malformed_profile_is_one_clear_error(damage: object) -> None:
    data = make_profile().to_dict()
    damage(data)  # type: ignore[operator]
    with pytest.raises(ProfileFormatError, match="malformed"):
        Profile.from_dict(data)
