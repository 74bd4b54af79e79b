"""Memory, utilization and temperature are read every tick on every GPU through one plain copy
of the binding's struct per GPU (`nvml._reader`): what they give is what the binding's own
wrappers give from the same library, errors included."""

from __future__ import annotations

import pytest

from gputop.sources import nvml
from gputop.testing.fake_nvml import FakeNvml, Fault
from gputop.testing.synthetic import node

pynvml = pytest.importorskip("pynvml")


def _open(fake: FakeNvml) -> nvml.NvmlSource:
    src = nvml.NvmlSource()
    src.open()
    return src


def test_the_readers_give_what_the_bindings_wrappers_give() -> None:
    with FakeNvml([node(2)]) as fake:
        src = _open(fake)
        try:
            dev = src.devices[0]
            h = dev.handle
            util = nvml._reader(pynvml, "nvmlDeviceGetUtilizationRates", "c_nvmlUtilization_t")
            mem = nvml._reader(pynvml, "nvmlDeviceGetMemoryInfo_v2", "c_nvmlMemory_v2_t",
                               version=pynvml.nvmlMemory_v2)
            temp = nvml._reader(pynvml, "nvmlDeviceGetTemperatureV", "c_nvmlTemperature_v1_t",
                                "temperature", version=pynvml.nvmlTemperature_v1,
                                sensorType=0)
            assert util is not None and mem is not None and temp is not None
            u, wu = util(h), pynvml.nvmlDeviceGetUtilizationRates(h)
            assert (u.gpu, u.memory) == (wu.gpu, wu.memory)
            m, wm = mem(h), pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
            assert (m.total, m.used, m.reserved, m.free) == (wm.total, wm.used, wm.reserved,
                                                             wm.free)
            assert temp(h) == pynvml.nvmlDeviceGetTemperatureV(h, 0)
            sample, _ = src._poll_fast(dev, 0.0)
            assert (sample.util_gpu, sample.mem_used, sample.temp_gpu) == (
                float(wu.gpu), wm.used, float(pynvml.nvmlDeviceGetTemperatureV(h, 0)))
        finally:
            src.close()


def test_a_reader_raises_the_bindings_error_for_what_the_library_answers() -> None:
    fault = Fault("nvmlDeviceGetMemoryInfo_v2", nvml.ERR_NO_PERMISSION)
    with FakeNvml([node(2)], faults=[fault]) as fake:
        src = _open(fake)
        try:
            mem = nvml._reader(pynvml, "nvmlDeviceGetMemoryInfo_v2", "c_nvmlMemory_v2_t",
                               version=pynvml.nvmlMemory_v2)
            assert mem is not None
            with pytest.raises(pynvml.NVMLError_NoPermission):
                mem(src.devices[0].handle)
        finally:
            src.close()


def test_a_binding_without_what_a_reader_needs_is_called_through_its_wrapper() -> None:
    class Bare:
        NVMLError = pynvml.NVMLError
        asked: list[tuple[object, ...]] = []

        def nvmlDeviceGetTemperatureV(self, handle: object, sensor: int) -> int:
            self.asked.append((handle, sensor))
            return 61

    assert nvml._reader(Bare(), "nvmlDeviceGetTemperatureV", "c_nvmlTemperature_v1_t") is None
    dev = nvml._Device(index=0, handle="h", nvml=Bare())
    read = dev.reader("nvmlDeviceGetTemperatureV", (0,), "nvmlDeviceGetTemperatureV",
                      "c_nvmlTemperature_v1_t", "temperature")
    assert dev.ask("temp_v", read, "h") == 61 and Bare.asked == [("h", 0)]
    assert dev.reader("nvmlDeviceGetTemperatureV", (0,), "nvmlDeviceGetTemperatureV",
                      "c_nvmlTemperature_v1_t", "temperature") is read  # made once
