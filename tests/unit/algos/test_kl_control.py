import pytest

from tether.algos.kl_control import AdaptiveKLController, FixedKLController


def test_fixed_never_moves():
    c = FixedKLController(0.05)
    c.update(100.0, 128)
    assert c.value == 0.05
    d = FixedKLController(1.0)
    d.load_state_dict(c.state_dict())
    assert d.value == 0.05


def test_adaptive_above_target_clipped():
    # error = 9/6 - 1 = 0.5 -> clip 0.2; beta = 0.1 * (1 + 0.2 * 128/10000) = 0.1 * 1.00256 = 0.100256
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    c.update(9.0, 128)
    assert c.value == pytest.approx(0.100256)


def test_adaptive_below_target_inside_band():
    # error = 5.4/6 - 1 = -0.1 (no clip); beta = 0.1 * (1 - 0.1 * 128/10000) = 0.1 * 0.99872 = 0.099872
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    c.update(5.4, 128)
    assert c.value == pytest.approx(0.099872)


def test_adaptive_clipped_below():
    # error = 0/6 - 1 = -1 -> clip -0.2; beta = 0.1 * (1 - 0.2 * 128/10000) = 0.1 * 0.99744 = 0.099744
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    c.update(0.0, 128)
    assert c.value == pytest.approx(0.099744)


def test_adaptive_on_target_and_compounding():
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    c.update(6.0, 128)  # error 0 -> unchanged
    assert c.value == pytest.approx(0.1)
    c.update(9.0, 128)
    c.update(9.0, 128)  # 0.1 * 1.00256^2 = 0.1005127
    assert c.value == pytest.approx(0.1 * 1.00256**2)


def test_adaptive_state_roundtrip():
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    c.update(9.0, 128)
    d = AdaptiveKLController(0.5, target=6.0, horizon=10000)
    d.load_state_dict(c.state_dict())
    assert d.value == c.value


@pytest.mark.parametrize("target,horizon", [(0.0, 10), (-1.0, 10), (6.0, 0), (6.0, -5)])
def test_adaptive_validation(target, horizon):
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target=target, horizon=horizon)
