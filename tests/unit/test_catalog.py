import datetime as dt

import pytest

from gpuscout import catalog
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout.core.errors import UsageError
from gpuscout.core.spec import Precision

REQUIRED = [
    "h200",
    "h100_sxm",
    "h100_pcie",
    "h100_nvl",
    "b200",
    "a100_sxm4_40gb",
    "a100_sxm4_80gb",
    "a100_pcie_40gb",
    "a100_pcie_80gb",
    "l40s",
    "l4",
    "a10",
    "a10g",
    "v100_sxm2_16gb",
    "t4",
    "rtx_4090",
    "rtx_3090",
    "rtx_3060_12gb",
    "rtx_a6000",
    "jetson_agx_orin_64gb",
    "a40",
]


@pytest.mark.parametrize(
    "nvml_name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA H100 NVL", "h100_nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
        ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),  # not the L4
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),  # not the A10
        ("Tesla T4", "t4"),
        ("Tesla V100-SXM2-16GB", "v100_sxm2_16gb"),
        ("Tesla V100-SXM2-32GB", "v100_sxm2_32gb"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),
        ("NVIDIA GeForce RTX 3090", "rtx_3090"),
        ("NVIDIA GeForce RTX 3090 Ti", None),  # a different card
        ("NVIDIA GeForce RTX 3060", "rtx_3060_12gb"),
        ("NVIDIA RTX A6000", "rtx_a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),  # not the RTX A6000
        ("NVIDIA A40", "a40"),
        ("NVIDIA RTX A4000", None),  # not the A40
        ("Orin (nvgpu)", "jetson_agx_orin_64gb"),
        ("NVIDIA H200 NVL", None),  # a different product, not the SXM part
        (None, None),
    ],
)
def test_nvml_names_map_to_entries(nvml_name, expected):
    entry = catalog.match(nvml_name)
    assert (entry.id if entry else None) == expected


def test_the_catalog_has_every_gpu_the_field_asks_about_in_every_segment():
    ids = {g.id for g in catalog.gpus()}
    assert set(REQUIRED) <= ids and len(ids) >= 18
    assert {g.segment for g in catalog.gpus()} == {"datacenter", "workstation", "consumer", "edge"}


def test_every_entry_is_sourced_and_dense_never_above_sparse():
    for g in catalog.gpus():
        assert len(g.source) > 20, g.id
        for path in ("tf32", "fp16", "bf16"):
            dense, sparse = getattr(g, f"{path}_tflops"), getattr(g, f"{path}_sparse_tflops")
            if dense and sparse:
                assert dense <= sparse, (g.id, path)
        # units: TFLOP/s and GB/s in plausible ranges (a value in FLOP/s or bytes would be far off)
        assert 1 < g.fp32_tflops < 200 and 100 < g.memory_bandwidth_gbs < 20_000 and 8 <= g.memory_gb <= 300
        # tensor paths are faster than plain fp32 where they exist
        assert all(v is None or v >= g.fp32_tflops for v in (g.tf32_tflops, g.fp16_tflops, g.bf16_tflops))


def test_gpus_without_a_path_have_no_peak_for_it():
    t4, v100 = catalog.load().get("t4"), catalog.load().get("v100_sxm2_16gb")
    assert t4.bf16_tflops is None and t4.tf32_tflops is None and v100.bf16_tflops is None


def test_every_price_is_dated_sourced_and_old_ones_are_stale():
    cat = catalog.load()
    assert cat.prices
    for p in cat.prices:
        assert p.source and p.as_of <= dt.date.today()
    old = next(p for p in cat.prices if p.date == "2024-06")
    assert old.stale(dt.date(2025, 7, 1)) and not old.stale(dt.date(2025, 5, 1))


def test_peak_paths_per_precision():
    h100, t4 = catalog.match("NVIDIA H100 80GB HBM3"), catalog.match("Tesla T4")
    assert h100.peak_tflops(Precision.fp32) == (494.5, "tf32")
    assert h100.peak_tflops(Precision.mixed_bfloat16) == (989.5, "bf16")
    assert t4.peak_tflops(Precision.fp32) == (8.1, "fp32")
    assert t4.peak_tflops(Precision.mixed_bfloat16) == (None, "bf16")


def test_mfu_from_resnet50_throughput():
    # 6,600 img/s x 3 x 7.716 GFLOPs = 152.8 TFLOP/s; over 989.5 = 15.4%
    achieved = achieved_tflops(3 * 7_715_946_496, 6600.0)
    assert achieved == pytest.approx(152.78, rel=1e-3)
    value, peak, path = mfu(achieved, catalog.match("NVIDIA H200"), Precision.mixed_bfloat16)
    assert (peak, path) == (989.5, "bf16") and value == pytest.approx(0.1544, rel=1e-3)
    assert mfu(achieved, None, Precision.fp32) == (None, None, None)


def test_unknown_names_suggest_close_ones():
    with pytest.raises(UsageError, match="unknown GPU 'h100_sxn': did you mean h100_sxm"):
        catalog.load().get("h100_sxn")
    assert catalog.load().get("NVIDIA L4").id == "l4"


def test_a_user_file_adds_gpus_overrides_fields_and_replaces_prices(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text("""
[[gpu]]
id = "l4"
memory_bandwidth_gbs = 320.0

[[gpu]]
id = "my_card"
name = "Lab Card 9000"
segment = "workstation"
nvml_patterns = ["Card 9000"]
architecture = "Ada Lovelace"
compute_capability = "8.9"
memory_gb = 32
memory_type = "GDDR6"
memory_bandwidth_gbs = 700
fp32_tflops = 40.0
bf16_tflops = 150.0
tdp_w = 300
ecc = false
mig_instances = 0
source = "our own measurement, 2026-11"

[[price]]
gpu = "l4"
kind = "cloud"
provider = "aws"
usd = 0.70
date = "2026-11"
source = "our AWS bill"
""")
    cat = catalog.load(str(user))
    assert cat.get("l4").memory_bandwidth_gbs == 320.0 and cat.get("l4").bf16_tflops == 121.0
    assert catalog.match("Lab Card 9000", cat).id == "my_card"
    aws = [p for p in cat.prices_for("l4") if p.provider == "aws"]
    assert [p.usd for p in aws] == [0.70]


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[gpu]]\nid = "x"\nname = "X"\n', r"\[\[gpu\]\] #1 \(line 1, id 'x'\): segment: Field required"),
        (
            '[[price]]\ngpu = "l4"\nkind = "cloud"\nprovider = "p"\nusd = -1\ndate = "2026-01"\nsource = "our bill"\n',
            r"\[\[price\]\] #1 \(line 1\): usd: Input should be greater than 0",
        ),
        ('[[gpu]]\nid = "l4"\nbf16_tflops = 500.0\nbf16_sparse_tflops = 242.0\n', "swapped"),
        (
            '[[price]]\ngpu = "nope"\nkind = "cloud"\nprovider = "p"\nusd = 1\ndate = "2026-01"\nsource = "our bill"\n',
            "prices name GPUs that are not in it: nope",
        ),
        ("[[gpu]\n", "not valid TOML"),
        ('[[gpus]]\nid = "x"\n', "unknown table"),
    ],
)
def test_a_malformed_user_file_names_the_bad_field_and_line(tmp_path, text, message):
    user = tmp_path / "bad.toml"
    user.write_text(text)
    with pytest.raises(UsageError, match=message):
        catalog.load(str(user))
