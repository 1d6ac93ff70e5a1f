"""Shared fixtures: GPU tests run only where a CUDA GPU is present."""
import pytest


def _gpu_arch():
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_capability()
    except Exception:
        pass
    return None


def pytest_collection_modifyitems(config, items):
    if _gpu_arch() is not None:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here (run make test-gpu on a GPU node)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
