"""get_device prefers cuda, then mps, then cpu; environment_report says what it found."""

import sys

import torch

from mha_course import device as device_module
from mha_course.device import environment_report, get_device, triton_available


def test_cpu_when_nothing_else(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert get_device() == torch.device("cpu")


def test_cuda_first(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert get_device() == torch.device("cuda")


def test_mps_second(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert get_device() == torch.device("mps")


def test_explicit_preference_wins():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device("cuda:1") == torch.device("cuda", 1)


def test_matches_this_machine():
    """On whatever runs the tests (a CUDA box, a Mac with MPS, a CPU), the device is the best one it has."""
    if torch.cuda.is_available():
        expected = "cuda"
    elif torch.backends.mps.is_available():
        expected = "mps"
    else:
        expected = "cpu"
    device = get_device()
    assert device.type == expected
    assert torch.zeros(1, device=device).device.type == expected  # and a tensor can be made there


def test_environment_report(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    report = environment_report()
    assert report["torch"] == torch.__version__ and report["device"] == "cpu"
    assert all(isinstance(v, str) for v in report.values())
    assert ("triton" in report) == triton_available()


def test_triton_unavailable_when_import_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    assert device_module.triton_available() is False
    assert "triton" not in environment_report()
