import pytest

from gpuscout import catalog
from gpuscout.analysis.mfu import achieved_tflops, mfu
from gpuscout.spec import Precision


@pytest.mark.parametrize("nvml_name, expected", [
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
    ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"),
    ("NVIDIA L4", "l4"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("NVIDIA L40S", None),  # not an L4
    ("NVIDIA H200 NVL", None),  # a different product, not the SXM part
    (None, None),
])
def test_nvml_names_map_to_entries(nvml_name, expected):
    entry = catalog.match(nvml_name)
    assert (entry.id if entry else None) == expected


def test_every_entry_has_a_source_and_dense_peaks_below_sparse_marketing():
    for entry in catalog.gpus():
        assert entry.source
        # the dense bf16 peak of an H100/H200 is 989.5; the 1,979 figure is with sparsity
        assert (entry.bf16_tflops or 0) < 1000


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
