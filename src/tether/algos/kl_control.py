"""KL-penalty coefficient (beta) controllers (Ziegler et al. 2019, sec. 2.2 / lm-human-preferences)."""

from __future__ import annotations

from typing import Any


class FixedKLController:
    """Constant beta; ``update`` is a no-op."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (kept for interface parity with AdaptiveKLController)."""

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.value = float(d["value"])


class AdaptiveKLController:
    """Proportional controller steering the observed KL toward ``target``.

    beta <- beta * (1 + clip(KL/target - 1, -0.2, 0.2) * n_steps / horizon)
    (Ziegler et al. 2019, eq. 2; the +-0.2 clip is from lm-human-preferences).
    """

    def __init__(self, init_value: float, target: float, horizon: int) -> None:
        if not target > 0:
            raise ValueError(f"target must be > 0, got {target}")
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_value)
        self.target = float(target)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjust ``value`` after a batch of ``n_steps`` episodes whose mean KL was ``current_kl``."""
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        """Only ``value`` is state; target/horizon come from the constructor (config)."""
        return {"value": self.value}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.value = float(d["value"])
