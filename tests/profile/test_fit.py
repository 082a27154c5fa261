"""The fit: measurements of a known engine give that engine back."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.engine.model.cost_preset import CostPreset
from tandem.profile.fit import build_preset, fit_cost, predict_point, record_wave
from tandem.profile.plan import PointSpec
from tests.profile.factories import TINY, limits_of, make_preset, measure, sweep_of


def _close(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * abs(want)


def _fitted(preset: CostPreset, **kw: float) -> tuple[CostPreset, float]:
    results = measure(preset, sweep_of(preset), **kw)
    fit = fit_cost(preset.model, limits_of(preset), results)
    return build_preset(preset.model, limits_of(preset), fit), fit.request_s


def test_exact_measurements_give_every_constant_back() -> None:
    """Each term shows in the sweep (compute-bound prefills, memory-bound decode steps,
    overheads, a request overhead in TTFT): each comes back within the search grid's
    step (0.02 decades, 4.7 %)."""
    true = make_preset()
    fitted, request_s = _fitted(true, request_s=0.003)
    assert _close(fitted.gpu.peak_flops, true.gpu.peak_flops, 0.05)
    assert _close(fitted.gpu.hbm_bytes_per_s, true.gpu.hbm_bytes_per_s, 0.05)
    for name in ("overhead_s_per_layer", "seq_overhead_s_per_layer"):
        got, want = getattr(fitted.calibration, name), getattr(true.calibration, name)
        assert _close(got, want, 0.05), (name, got, want)
    assert _close(request_s, 0.003, 0.1)
    assert fitted.fit["max_abs_error_pct"] < 2.0


def test_noisy_measurements_still_predict_within_the_noise() -> None:
    """±10 % noise on every request: the medians move a few percent, and so does the fit;
    its predictions for loads it never saw stay within 10 %."""
    true = make_preset()
    fitted, _ = _fitted(true, noise=0.10, seed=3)
    held_out = [PointSpec("decode", 200, 16, b, 1) for b in (3, 12, 48)]
    held_out += [PointSpec("prefill", p, 1, 1, 1) for p in (100, 700, 3000)]
    for point in held_out:
        for got, want in zip(predict_point(fitted, point), predict_point(true, point),
                             strict=True):  # fmt: skip
            if want is not None:
                assert got is not None and _close(got, want, 0.10), (point.label, got, want)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    peak_log=st.floats(11.0, 15.0),
    hbm_log=st.floats(9.5, 12.5),
    fixed_ms=st.floats(0.5, 20.0),
    per_seq_us=st.floats(10.0, 500.0),
    tiny=st.booleans(),
)
def test_any_engine_is_predicted_back_at_its_own_points(
    peak_log: float, hbm_log: float, fixed_ms: float, per_seq_us: float, tiny: bool
) -> None:
    """Whatever the engine (a GPU-sized model or the tiny CPU one, compute or memory
    bound, overheads large or small), the fitted preset predicts the sweep it came from
    within 5 %, even where two terms cannot be told apart."""
    true = make_preset(model=TINY if tiny else None, peak_flops=10**peak_log,
                       hbm_bytes_per_s=10**hbm_log, fixed_s=fixed_ms / 1e3,
                       per_seq_s=per_seq_us / 1e6)  # fmt: skip
    points = sweep_of(true)
    fitted, _ = _fitted(true)
    for point in points:
        for got, want in zip(predict_point(fitted, point), predict_point(true, point),
                             strict=True):  # fmt: skip
            if want is not None:
                assert got is not None and _close(got, want, 0.05), (point.label, got, want)


def test_a_term_the_sweep_never_saw_stays_negligible() -> None:
    """A device so fast at moving bytes that no iteration is memory-bound: the fit does
    not invent a memory rate that would bind beyond the sweep."""
    true = make_preset(hbm_bytes_per_s=1e16)
    fitted, _ = _fitted(true)
    assert fitted.gpu.hbm_bytes_per_s >= 1e15


def test_the_waves_run_the_simulated_engines_iterations() -> None:
    """A decode wave whose prompts fit one token budget: one prefill iteration for all,
    then one decode iteration per further token, every request in it."""
    wave = record_wave(TINY, limits_of(make_preset(model=TINY)), PointSpec("decode", 31, 8, 16, 1))
    assert len(wave.shapes) == 8
    assert wave.shapes[0][0] == 16 * 31 and wave.shapes[0][2] == 16
    assert all(shape[0] == 16 and shape[2] == 16 for shape in wave.shapes[1:])
    assert set(wave.first) == {0} and set(wave.last) == {7}


def test_too_few_points_are_refused() -> None:
    true = make_preset()
    with pytest.raises(ValueError, match="needs 3 or more"):
        fit_cost(true.model, limits_of(true), measure(true, sweep_of(true)[:2]))
