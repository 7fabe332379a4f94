from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_tfperf.catalog.scenarios import MODULES, load
from pytest_tfperf.catalog.sizes import SIZE_ENV_VAR, CatalogSize, pick, resolve_size


def test_the_environment_chooses_the_size() -> None:
    assert resolve_size({SIZE_ENV_VAR: "small"}, gpu_available=lambda: True) is CatalogSize.SMALL
    assert resolve_size({SIZE_ENV_VAR: " Large "}, gpu_available=lambda: False) is CatalogSize.LARGE


def test_without_a_choice_a_gpu_gets_the_large_size() -> None:
    assert resolve_size({}, gpu_available=lambda: True) is CatalogSize.LARGE
    assert resolve_size({}, gpu_available=lambda: False) is CatalogSize.DEFAULT


def test_an_unknown_size_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="TFPERF_CATALOG_SIZE='huge'.*small, default, large"):
        resolve_size({SIZE_ENV_VAR: "huge"}, gpu_available=lambda: False)


def test_pick_maps_each_size() -> None:
    assert [pick(s, 1, 2, 3) for s in CatalogSize] == [1, 2, 3]


def test_loading_the_catalog_does_not_import_tensorflow() -> None:
    # Collecting the catalog (and --help) must stay cheap: TensorFlow is imported by build() only.
    code = ("import sys\n"
            "from pytest_tfperf.catalog.scenarios import MODULES, load\n"
            "import pytest_tfperf.catalog.test_catalog\n"
            "[load(k) for k in MODULES]\n"
            "print(sorted(m for m in ('tensorflow', 'keras', 'numpy') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("key", MODULES)
def test_every_scenario_module_describes_itself(key: str) -> None:
    module = load(key)
    assert module.KEY == key
    assert module.TITLE and module.__doc__
    assert module.COMPARISONS and any(c.gated for c in module.COMPARISONS)
    assert callable(module.build)


def test_an_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="allocation_in_loop"):
        load("nope")
