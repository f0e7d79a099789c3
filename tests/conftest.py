"""Shared test helpers. GPU tests are marked `gpu` and skipped, with the reason, where cuDNN or a
GPU is missing; they are never silently passed."""
from __future__ import annotations

import pytest

from harness import backends

# The fake backend is for tests only: registered here, never in harness/backends/__init__.py.
# Worker processes receive backends.registry(), so GPU-path tests see it too.
backends.register("fake", "harness.backends.fake:FakeBackend")


def gpu_unavailable_reason() -> str | None:
    from harness import backends
    return backends.get("cudnn").unavailable_reason()


@pytest.fixture
def require_gpu():
    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {reason}"))
