"""cpu.retain_memory: glibc's malloc keeps big blocks on its heap and freed memory mapped."""

import subprocess
import sys
import textwrap

import pytest

from tether.engines.cpu import memory

ON_GLIBC = memory.glibc_mallopt() is not None

# Runs in a fresh interpreter (the allocator's thresholds are process state): how many bytes
# glibc maps with mmap for a 24 MiB tensor, and how many free bytes its heap keeps after the
# tensor is gone.
PROBE = textwrap.dedent("""
    import ctypes, sys
    import torch
    from tether.engines.cpu.memory import retain_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "retain":
        assert retain_freed_memory()
    before = libc.mallinfo2().hblkhd
    x = torch.ones(6 << 20)
    mapped = libc.mallinfo2().hblkhd - before
    del x
    print(mapped, libc.mallinfo2().fordblks)
""")


def probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    mapped, free_kept = out.stdout.split()
    return int(mapped), int(free_kept)


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's malloc only: elsewhere retain_freed_memory does nothing")
def test_big_tensors_come_from_the_heap_and_stay_there():
    block = 24 << 20
    mapped, _ = probe("default")
    assert mapped >= block  # glibc's default: its own mmap, unmapped again on free
    mapped, free_kept = probe("retain")
    assert mapped == 0
    assert free_kept >= block  # freed, but still mapped for the next allocation


class FakeMallopt:
    def __init__(self, result: int = 1):
        self.calls = []
        self.result = result

    def __call__(self, param, value):
        self.calls.append((param, value))
        return self.result


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(memory, "_applied", False)
    for name in memory.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_sets_both_thresholds_once(fresh):
    fake = FakeMallopt()
    fresh.setattr(memory, "glibc_mallopt", lambda: fake)
    assert memory.retain_freed_memory()
    assert fake.calls == [(memory.M_MMAP_THRESHOLD, 32 << 20), (memory.M_TRIM_THRESHOLD, 1 << 30)]
    assert memory.retain_freed_memory()
    assert len(fake.calls) == 2  # the second call changes nothing


def test_leaves_a_user_tuned_malloc_alone(fresh):
    fake = FakeMallopt()
    fresh.setattr(memory, "glibc_mallopt", lambda: fake)
    fresh.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert not memory.retain_freed_memory()
    assert fake.calls == []


def test_does_nothing_off_glibc(fresh):
    fresh.setattr(memory, "glibc_mallopt", lambda: None)
    assert not memory.retain_freed_memory()


def test_a_refused_threshold_is_reported_not_applied(fresh, caplog):
    fresh.setattr(memory, "glibc_mallopt", lambda: FakeMallopt(result=0))
    assert not memory.retain_freed_memory()
    assert not memory._applied
    assert "refused" in caplog.text


def test_preparing_cpu_models_applies_it_only_when_asked(fresh):
    """The engines apply cpu.retain_memory when they prepare models for the CPU (it used to be
    begin_run's business)."""
    from tether.config import RLConfig, load_config
    from tether.engines import engine_settings, prepare_models

    calls = []
    fresh.setattr(memory, "retain_freed_memory", lambda: calls.append(1) or True)
    base = ["prompts=bench", "model.name_or_path=bench", "reward.models=[bench]", "run.device=cpu",
            "cpu.linear_backend=aten"]
    on = load_config(RLConfig, None, base)
    prepare_models([], engine_settings(on.run, on.model, on.cpu))
    assert calls == [1]
    off = load_config(RLConfig, None, base + ["cpu.retain_memory=false"])
    prepare_models([], engine_settings(off.run, off.model, off.cpu))
    assert calls == [1]
