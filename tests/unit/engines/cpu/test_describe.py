"""The CPU description a bench report carries, parsed from /proc/cpuinfo text."""

from __future__ import annotations

from tether.engines.cpu.describe import cpu_description, describe, parse_cpuinfo

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C
stepping\t: 8
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: a second block that must be ignored
flags\t\t: avx2
"""


def test_the_first_processor_block_gives_name_numbers_and_matmul_flags():
    info = parse_cpuinfo(CPUINFO)
    assert info == {"vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) Platinum 8481C",
                    "family_model_stepping": "6/143/8",
                    # MATMUL_FLAGS order; amx_int8 and sse2 are not matmul-kernel flags we record.
                    "flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]}
    assert describe(info | {"logical_cpus": 2}) == (
        "Intel(R) Xeon(R) Platinum 8481C (6/143/8), 2 logical CPUs, avx2 avx512f avx512_bf16 amx_bf16 amx_tile")


def test_missing_fields_are_none_and_a_missing_file_falls_back(tmp_path):
    assert parse_cpuinfo("processor\t: 0\n") == {"vendor": None, "model": None, "family_model_stepping": None,
                                                  "flags": []}
    info = cpu_description(tmp_path / "no-such-cpuinfo")
    assert info["flags"] == [] and info["family_model_stepping"] is None
    assert info["logical_cpus"] >= 1 and info["capability"]
    assert describe({"model": None, "logical_cpus": 4}) == "unknown CPU, 4 logical CPUs"
