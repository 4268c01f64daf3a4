"""FlashInfer support checks, enum lookup and return normalization (kernels/flashinfer_compat.py), on a CPU."""

import pytest
import torch

from megatron_mxfp8_moe.activations import Activation
from megatron_mxfp8_moe.errors import BackendUnavailableError, MXFP8InputError
from megatron_mxfp8_moe.flashinfer_mxfp8 import (
    require_flashinfer_cutlass_mxfp8,
    require_flashinfer_routed_mxfp8,
)
from megatron_mxfp8_moe.kernels.flashinfer_compat import (
    FlashInferCaps,
    first_output,
    flashinfer_activation_type,
    flashinfer_enum,
    flashinfer_support,
    parse_flashinfer_version,
    probe_flashinfer_caps,
)

KERNELS = ["routed", "cutlass"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_supported_on_sm100_and_sm103(kernel):
    for capability in [(10, 0), (10, 3)]:
        ok, reason = flashinfer_support(FlashInferCaps("0.7.2.post1", capability, "NVIDIA B200"), kernel)
        assert ok, reason
        assert f"SM{capability[0]}{capability[1]}" in reason


@pytest.mark.parametrize("kernel", KERNELS)
def test_missing_package_names_package_and_minimum(kernel):
    ok, reason = flashinfer_support(FlashInferCaps(None, (10, 0), import_error="ModuleNotFoundError: tvm_ffi"), kernel)
    assert not ok
    assert "flashinfer-python" in reason and ">= 0.6.8" in reason and "tvm_ffi" in reason


@pytest.mark.parametrize("kernel,version", [("routed", "0.6.7"), ("cutlass", "0.6.6"), ("routed", "0.6.4")])
def test_old_version_names_found_and_minimum(kernel, version):
    ok, reason = flashinfer_support(FlashInferCaps(version, (10, 0)), kernel)
    assert not ok
    assert ">= 0.6.8" in reason and version in reason
    if kernel == "routed":
        assert "output=" in reason


@pytest.mark.parametrize("kernel", KERNELS)
def test_cpu_only_reason(kernel):
    ok, reason = flashinfer_support(FlashInferCaps("0.7.2.post1", None), kernel)
    assert not ok
    assert "no CUDA device" in reason and "SM100/SM103" in reason


@pytest.mark.parametrize("kernel", KERNELS)
def test_sm90_h200_reason_names_the_gpu(kernel):
    ok, reason = flashinfer_support(FlashInferCaps("0.7.2.post1", (9, 0), "NVIDIA H200"), kernel)
    assert not ok
    assert "SM90 (NVIDIA H200)" in reason and "no MX" in reason and "SM100/SM103" in reason
    ok, reason = flashinfer_support(FlashInferCaps("0.7.2.post1", (9, 0)), kernel)  # no name: generic Hopper names
    assert not ok and "SM90 (H100/H200)" in reason


@pytest.mark.parametrize("capability", [(12, 0), (11, 0), (10, 1), (8, 0)])
def test_other_architectures_are_rejected(capability):
    ok, reason = flashinfer_support(FlashInferCaps("0.7.2.post1", capability), "routed")
    assert not ok and f"SM{capability[0]}{capability[1]}" in reason


def test_support_accepts_any_object_with_the_plain_fields():
    class DeviceCaps:
        flashinfer_version = "0.6.8"
        cuda_capability = (10, 3)

    assert flashinfer_support(DeviceCaps(), "cutlass")[0]

    class CapabilityNamedCaps:  # the field name kernels/caps.py DeviceCaps uses
        flashinfer_version = "0.7.2.post1"
        capability = (10, 0)

    assert flashinfer_support(CapabilityNamedCaps(), "routed")[0]
    CapabilityNamedCaps.capability = (9, 0)
    assert not flashinfer_support(CapabilityNamedCaps(), "routed")[0]


def test_bad_version_and_kernel_names():
    ok, reason = flashinfer_support(FlashInferCaps("not-a-version", (10, 0)), "routed")
    assert not ok and "not-a-version" in reason
    with pytest.raises(MXFP8InputError, match="kernel"):
        flashinfer_support(FlashInferCaps("0.7.2", (10, 0)), "triton")
    assert parse_flashinfer_version("0.7.2.post1") > parse_flashinfer_version("0.6.8")


@pytest.mark.parametrize("require", [require_flashinfer_routed_mxfp8, require_flashinfer_cutlass_mxfp8])
def test_require_raises_backend_unavailable_with_the_reason(require):
    with pytest.raises(BackendUnavailableError, match=r"SM90 \(NVIDIA H200\).*no MX"):
        require(FlashInferCaps("0.7.2.post1", (9, 0), "NVIDIA H200"))
    with pytest.raises(BackendUnavailableError, match="no CUDA device"):
        require(FlashInferCaps("0.7.2.post1", None))
    with pytest.raises(BackendUnavailableError, match=">= 0.6.8"):
        require(FlashInferCaps("0.6.5", (10, 0)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message; this machine has CUDA")
@pytest.mark.parametrize("require", [require_flashinfer_routed_mxfp8, require_flashinfer_cutlass_mxfp8])
def test_require_on_this_cpu_machine_reads_clearly(require):
    caps = probe_flashinfer_caps()
    assert caps.cuda_capability is None
    with pytest.raises(BackendUnavailableError, match="flashinfer-python|no CUDA device"):
        require()


def test_enums_come_from_the_installed_package():
    pytest.importorskip("flashinfer", reason="flashinfer-python is not importable; enum lookup skipped")
    from flashinfer.fused_moe import (
        ActivationType,
        Fp8QuantizationType,
        RoutingMethodType,
        WeightLayout,
    )

    assert flashinfer_enum("Fp8QuantizationType", "MxFp8") is Fp8QuantizationType.MxFp8
    assert flashinfer_enum("WeightLayout", "MajorK") is WeightLayout.MajorK
    assert flashinfer_enum("RoutingMethodType", "Renormalize") is RoutingMethodType.Renormalize
    assert flashinfer_activation_type(Activation.SWIGLU) is ActivationType.Swiglu
    assert flashinfer_activation_type(Activation.SQUARED_RELU) is ActivationType.Relu2
    with pytest.raises(BackendUnavailableError, match="ActivationType.NoSuchThing"):
        flashinfer_enum("ActivationType", "NoSuchThing")


def test_unsupported_activation_is_an_input_error():
    with pytest.raises(MXFP8InputError, match="geglu"):
        flashinfer_activation_type(Activation.GEGLU)


def test_first_output_normalizes_list_and_tensor_returns():
    tensor = torch.ones(2)
    assert first_output(tensor) is tensor
    assert first_output([tensor, torch.zeros(1)]) is tensor
    with pytest.raises(BackendUnavailableError, match="empty"):
        first_output([])


def test_cutlass_squared_relu_needs_flashinfer_0_6_10():
    """Before 0.6.10 cutlass_fused_moe checked a non-gated MXFP8 fc1's scales as if gated (PR #3082): squared
    ReLU on CUTLASS is refused there by name, at selection and at launch; SwiGLU and the routed kernel are not."""
    from megatron_mxfp8_moe.kernels.caps import DeviceCaps
    from megatron_mxfp8_moe.kernels.flashinfer_compat import flashinfer_activation_support
    from megatron_mxfp8_moe.kernels.select import select_backend

    for version in ("0.6.8", "0.6.9"):
        ok, reason = flashinfer_activation_support(version, "cutlass", Activation.SQUARED_RELU)
        assert not ok and ">= 0.6.10" in reason and f"found {version}" in reason and "#3082" in reason
        assert flashinfer_activation_support(version, "cutlass", Activation.SWIGLU)[0]
        assert flashinfer_activation_support(version, "routed", Activation.SQUARED_RELU)[0]
        with pytest.raises(BackendUnavailableError, match=r"squared_relu needs flashinfer-python >= 0\.6\.10"):
            require_flashinfer_cutlass_mxfp8(FlashInferCaps(version, (10, 0)), activation=Activation.SQUARED_RELU)
        caps = DeviceCaps("cuda", (10, 0), version, "3.6.0")
        with pytest.raises(BackendUnavailableError, match=r"'flashinfer_cutlass' cannot run here: .*>= 0\.6\.10"):
            select_backend("flashinfer_cutlass", caps, activation="squared_relu")
        assert select_backend("flashinfer_cutlass", caps, activation="swiglu")[0].value == "flashinfer_cutlass"
    for version in ("0.6.10", "0.7.2.post1"):
        assert flashinfer_activation_support(version, "cutlass", Activation.SQUARED_RELU)[0]
        caps = DeviceCaps("cuda", (10, 0), version, "3.6.0")
        assert select_backend("flashinfer_cutlass", caps, activation="squared_relu")[0].value == "flashinfer_cutlass"


@pytest.mark.parametrize("kernel", ["routed", "cutlass"])
@pytest.mark.parametrize("version", [None, "0.6.5"])
def test_a_hopper_gets_the_architecture_reason_whatever_flashinfer_is_installed(kernel, version):
    """No FlashInfer version runs these kernels on SM90: the reason says so, not "install / upgrade flashinfer"."""
    ok, reason = flashinfer_support(FlashInferCaps(version, (9, 0), "NVIDIA H200"), kernel)
    assert not ok and "SM90 (NVIDIA H200)" in reason and "SM100/SM103" in reason
    assert "install" not in reason and "0.6.5" not in reason


def test_launchers_check_the_device_of_their_tensors(monkeypatch):
    """On a host with mixed GPUs the launch check reads the tensors' device, not the current one: device 1 a B200,
    device 0 (current) an H100. Before, ``require_*()`` probed the current device once per process."""
    from megatron_mxfp8_moe.kernels import flashinfer_compat

    capabilities = {0: (9, 0), 1: (10, 0)}
    names = {0: "NVIDIA H100", 1: "NVIDIA B200"}

    def index(device):
        return 0 if device is None else torch.device("cuda", device).index if isinstance(device, int) else \
            torch.device(device).index

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capabilities[index(device)])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: names[index(device)])
    flashinfer_compat._probe_once.cache_clear()
    try:
        assert probe_flashinfer_caps(torch.device("cuda", 1)).cuda_capability == (10, 0)
        assert probe_flashinfer_caps(torch.device("cuda", 1)).device_name == "NVIDIA B200"
        assert probe_flashinfer_caps().cuda_capability == (9, 0)
        assert probe_flashinfer_caps("cpu").cuda_capability is None
        for require in (require_flashinfer_routed_mxfp8, require_flashinfer_cutlass_mxfp8):
            with pytest.raises(BackendUnavailableError, match="SM90|H100"):
                require(device=torch.device("cuda", 0))
            try:  # returns flashinfer.fused_moe where flashinfer-python imports, else names the package
                require(device=torch.device("cuda", 1))
            except BackendUnavailableError as error:
                assert "flashinfer-python" in str(error) and "SM90" not in str(error) and "H100" not in str(error)
            with pytest.raises(BackendUnavailableError, match="SM90|H100"):
                require(device="cuda")  # no index: the current device
    finally:
        flashinfer_compat._probe_once.cache_clear()
