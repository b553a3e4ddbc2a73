"""`kvscope bench gui --part fast`: a flat-out run's frames through the real window, measured."""


def test_the_fast_frame_benchmark_drives_a_flat_out_run_through_the_window(qtbot):
    from kvscope.app.bench.bench_gui import bench_fast_frame

    r = bench_fast_frame(frames=3, long_run_points=12_000)
    assert r["frames"] == 3 and r["steps_per_frame_median"] > 100  # flat out: many steps between two frames
    assert 0 < r["window_median_ms"] <= r["window_p90_ms"] and r["long_run_plots_median_ms"] > 0
