"""GPU clocks and temperature around a measurement, through NVML where it is installed."""

from __future__ import annotations

CLOCK_DROP = 0.9  # a run whose SM clock fell below 90% of its starting clock is flagged


class Telemetry:
    """Samples one GPU's SM clock (MHz) and temperature (C); empty samples without NVML."""

    def __init__(self, ordinal: int = 0) -> None:
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(ordinal)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML (AMD, no driver, not installed): no telemetry
            self.handle = None

    def sample(self) -> dict[str, int]:
        if self.handle is None:
            return {}
        nvml = self._nvml
        try:
            return {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM),
                    "temperature_c": nvml.nvmlDeviceGetTemperature(self.handle,
                                                                   nvml.NVML_TEMPERATURE_GPU)}
        except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a failure
            return {}

    @staticmethod
    def compare(before: dict[str, int], after: dict[str, int]) -> dict:
        """Both samples and whether the clock dropped during the timed launches."""
        out: dict = {f"{k}_before": v for k, v in before.items()}
        out.update({f"{k}_after": v for k, v in after.items()})
        if before.get("sm_clock_mhz") and after.get("sm_clock_mhz"):
            out["clock_dropped"] = after["sm_clock_mhz"] < CLOCK_DROP * before["sm_clock_mhz"]
        return out
