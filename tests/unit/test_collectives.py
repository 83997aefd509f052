import math

import pytest

from zerotune.collectives import alpha_beta_time, busbw, busbw_factor, fit_alpha_beta, interpolate_busbw


def test_busbw_factors_match_nccl_tests():
    # NVIDIA/nccl-tests doc/PERFORMANCE.md
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("broadcast", 4) == 1.0
    assert busbw("all_reduce", 1e9, 1.0, 2) == pytest.approx(1e9)


def test_alpha_beta_fit_recovers_parameters():
    alpha, bw = 20e-6, 100e9
    samples = [(s, alpha_beta_time("all_gather", s, 8, alpha, bw)) for s in (1e4, 1e6, 1e8, 1e9)]
    got_alpha, got_bw = fit_alpha_beta("all_gather", 8, samples)
    assert got_alpha == pytest.approx(alpha, rel=1e-6)
    assert got_bw == pytest.approx(bw, rel=1e-6)


def test_single_rank_costs_nothing():
    assert alpha_beta_time("all_reduce", 1e9, 1, 1e-5, 1e9) == 0.0


def test_curve_interpolation_is_log_log_and_clamped():
    curve = [(1e6, 10e9), (1e8, 100e9)]
    assert interpolate_busbw(curve, 1e7) == pytest.approx(math.sqrt(10e9 * 100e9))
    assert interpolate_busbw(curve, 1e3) == 10e9
    assert interpolate_busbw(curve, 1e12) == 100e9
