"""The window's run series: throughput is computed as points arrive, and must not depend on how
the points were split into frames."""

import numpy as np

from kvscope.app.host.points import SeriesPoint, point_array
from kvscope.app.gui.series import RunSeries


def random_points(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.uniform(0.001, 0.2, n))
    return [SeriesPoint(float(t), 0.5, 3, 1, int(rng.integers(0, 20)), 0.3, 0) for t in times]


def test_throughput_does_not_depend_on_how_frames_split_the_points():
    points = random_points(700)
    whole = RunSeries()
    whole.add_points(points)
    rng = np.random.default_rng(1)
    framed = RunSeries()
    i = 0
    while i < len(points):
        n = int(rng.integers(1, 30))
        framed.add_points(points[i:i + n])
        i += n
    assert np.allclose(framed.throughput(), whole.throughput())
    assert len(framed.throughput()) == len(points)


def test_throughput_is_tokens_over_the_trailing_second():
    series = RunSeries()
    series.add_points([SeriesPoint(0.3 * k, 0.0, 1, 0, 10, 0.0, 0) for k in range(1, 21)])  # 10 tokens per 0.3 s
    assert np.allclose(series.throughput()[4:], 40.0)  # four points' tokens in every trailing second
    series.add_points([SeriesPoint(6.8, 0.0, 1, 0, 0, 0.0, 0)])
    assert series.throughput()[-1] == 10.0  # only the point at 6.0 s lies in the second before 6.8 s


def test_a_frames_point_array_gives_the_series_its_series_points_give():
    points = random_points(300, seed=3)
    from_points, from_array = RunSeries(), RunSeries()
    from_points.add_points(points)
    from_array.add_points(point_array(points))  # what a frame carries across the pipe
    for key, values in from_points.arrays().items():
        assert np.array_equal(values, from_array.arrays()[key]), key
    assert from_array.total_output == sum(p.output_tokens for p in points)
