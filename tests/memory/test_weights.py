import pytest

from memory.services.weights import inflation_scale, recurrence_band, weight_compute


@pytest.mark.parametrize(
    ("shared", "band"),
    [(0, 1), (1, 2), (2, 2), (3, 3), (5, 3), (6, 4), (10, 4), (11, 5), (40, 5)],
)
def test_it_bands_recurrence_by_shared_tag_count(shared, band):
    assert recurrence_band(shared) == band


def test_it_weighs_all_default_dimensions_at_point_six():
    assert weight_compute(importance=None, emotional=None, recurrence=None, unresolved=None) == 0.6
    assert weight_compute(importance=3, emotional=3, recurrence=3, unresolved=3) == 0.6


def test_it_applies_the_design_factors():
    # (5×0.35 + 1×0.25 + 2×0.25 + 4×0.15) / 5 = 3.1 / 5
    assert weight_compute(importance=5, emotional=1, recurrence=2, unresolved=4) == pytest.approx(
        0.62
    )


def test_it_scales_an_inflated_window_only_when_large_enough():
    assert inflation_scale([0.9] * 4, minimum=5, ceiling=0.7, target=0.6) == 1.0
    assert inflation_scale([0.9] * 5, minimum=5, ceiling=0.7, target=0.6) == pytest.approx(
        0.6 / 0.9
    )
    assert inflation_scale([0.7] * 20, minimum=5, ceiling=0.7, target=0.6) == 1.0
