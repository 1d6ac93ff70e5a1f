"""Device detection and evidence modes, with fake devices for each case."""
import pytest

from pelib import device
from pelib.device import DeviceInfo, UnsupportedGPU

NONE = DeviceInfo(False, "no CUDA GPU here (no NVIDIA driver)")
H100 = DeviceInfo(True, name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, l2_bytes=50 * 2**20,
                  sm_clock_max_khz=1980000, driver_version=13000)
B200 = DeviceInfo(True, name="NVIDIA B200", cc=(10, 0), sm_count=148, l2_bytes=126 * 2**20,
                  sm_clock_max_khz=1965000, driver_version=13000)
A100 = DeviceInfo(True, name="NVIDIA A100-SXM4-80GB", cc=(8, 0), sm_count=108, l2_bytes=40 * 2**20,
                  sm_clock_max_khz=1410000, driver_version=12040)


@pytest.fixture(autouse=True)
def _no_force(monkeypatch):
    monkeypatch.delenv(device.FORCE_ENV, raising=False)


def test_detect_never_raises():
    info = device.detect()
    assert isinstance(info, DeviceInfo)
    assert info.present or info.reason


@pytest.mark.parametrize("info, mode", [(NONE, "compile-only"), (H100, "hopper-live"),
                                        (B200, "live"), (A100, "compile-only")])
def test_device_mode(info, mode):
    assert info.mode == mode
    assert device.mode(info=info) == mode


def test_stage_mode():
    assert device.mode("sm_100a", B200) == "live"
    assert device.mode("sm_90a", B200) == "compile-only"     # 'a' cubins run on their arch only
    assert device.mode("sm_90a", H100) == "hopper-live"
    assert device.mode("sm_100a", H100) == "compile-only"
    with pytest.raises(ValueError, match="unknown arch"):
        device.mode("sm_80", H100)


def test_banner_no_gpu(capsys):
    text = device.banner(info=NONE)
    assert text == ("Evidence mode: compile-only — no CUDA GPU here (no NVIDIA driver): sm_100a stages "
                    "show compiled facts and recorded B200 numbers")
    assert capsys.readouterr().out.strip() == text


def test_banner_modes():
    assert device.banner_text(info=B200).startswith("Evidence mode: live — NVIDIA B200 (sm_100, 148 SMs")
    h = device.banner_text(info=H100)
    assert h.startswith("Evidence mode: hopper-live — NVIDIA H100") and "recorded B200" in h
    t = device.banner_text("sm_100a", H100)
    assert t.startswith("Evidence mode: compile-only") and "need sm_100a" in t and "recorded B200" in t
    assert "runs neither" in device.banner_text(info=A100)


def test_force_compile_only(monkeypatch):
    monkeypatch.setenv(device.FORCE_ENV, "1")
    assert B200.mode == "compile-only"
    assert device.FORCE_ENV in device.banner_text(info=B200)
    with pytest.raises(UnsupportedGPU):
        device.require("sm_100a", B200)


def test_require():
    assert device.require("sm_90a", H100) is H100
    with pytest.raises(UnsupportedGPU, match="stage needs sm_100a, found sm_90: showing compiled and "
                                             "recorded results"):
        device.require("sm_100a", H100)
    with pytest.raises(UnsupportedGPU, match="found no CUDA GPU"):
        device.require("sm_100a", NONE)


def test_describe_and_dict():
    assert "132 SMs" in H100.describe() and "50 MiB L2" in H100.describe()
    d = H100.as_dict()
    assert d["arch"] == "sm_90" and d["mode"] == "hopper-live" and d["driver"] == "13.0"
