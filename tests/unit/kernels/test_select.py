"""select_backend: a pure function of DeviceCaps values (no device probing, no env vars)."""

import dataclasses

import pytest

from megatron_mxfp8_moe.errors import BackendUnavailableError, MXFP8InputError
from megatron_mxfp8_moe.kernels.base import Backend, Support
from megatron_mxfp8_moe.kernels.caps import DeviceCaps, detect_caps
from megatron_mxfp8_moe.kernels.flashinfer_backend import FlashInferRoutedBackend
from megatron_mxfp8_moe.kernels.reference_backend import ReferenceBackend
from megatron_mxfp8_moe.kernels.select import BACKEND_CLASSES, BACKEND_NAMES, make_backend, select_backend
from megatron_mxfp8_moe.kernels.triton_backend import TritonBackend

CPU = DeviceCaps("cpu", None, flashinfer_version="0.7.2.post1", triton_version="3.8.0")
H200 = DeviceCaps("cuda", (9, 0), flashinfer_version="0.7.2.post1", triton_version="3.8.0")
B200 = DeviceCaps("cuda", (10, 0), flashinfer_version="0.7.2.post1", triton_version="3.8.0")
GB300 = DeviceCaps("cuda", (10, 3), flashinfer_version="0.6.8", triton_version="3.8.0")
B200_NO_FLASHINFER = dataclasses.replace(B200, flashinfer_version=None)
A100 = DeviceCaps("cuda", (8, 0), flashinfer_version=None, triton_version="3.8.0")


@pytest.fixture(autouse=True)
def _flashinfer_imports(monkeypatch):
    """These caps are made up: auto's import probe answers "importable" unless a test says otherwise (on a machine
    where the package is missing the B200 rows must not depend on it)."""
    from megatron_mxfp8_moe.kernels import flashinfer_compat

    monkeypatch.setattr(flashinfer_compat, "flashinfer_import_problem", lambda: None)


@pytest.mark.parametrize(
    "caps, expected",
    [
        (CPU, Backend.REFERENCE),
        (H200, Backend.TRITON),
        (B200, Backend.FLASHINFER_ROUTED),
        (GB300, Backend.FLASHINFER_ROUTED),
    ],
)
def test_auto_picks_by_capability(caps, expected):
    backend, reason = select_backend("auto", caps)
    assert backend is expected
    assert reason.startswith("auto")


def test_auto_on_cpu_ignores_installed_flashinfer():
    backend, reason = select_backend("auto", CPU, activation="squared_relu")
    assert backend is Backend.REFERENCE
    assert "no CUDA device" in reason


def test_auto_falls_back_with_reasons_when_nothing_fits():
    backend, reason = select_backend("auto", B200_NO_FLASHINFER)
    assert backend is Backend.REFERENCE
    assert "flashinfer-python" in reason and "SM90" in reason  # both skipped backends say why
    backend, reason = select_backend("auto", A100)
    assert backend is Backend.REFERENCE and "SM80" in reason


def test_auto_skips_flashinfer_for_an_activation_it_lacks():
    backend, reason = select_backend("auto", B200, activation="geglu")
    assert backend is Backend.REFERENCE
    assert "geglu" in reason
    assert select_backend("auto", B200, activation="swiglu")[0] is Backend.FLASHINFER_ROUTED
    assert select_backend("auto", H200, activation="geglu")[0] is Backend.TRITON


@pytest.mark.parametrize(
    "request_name, caps, needle",
    [
        ("triton", CPU, "CUDA GPU"),
        ("triton", B200, "SM90"),
        ("flashinfer_routed", H200, "SM100/SM103"),
        ("flashinfer_routed", CPU, "SM100/SM103"),
        ("flashinfer", B200_NO_FLASHINFER, "flashinfer-python"),
        ("flashinfer_routed", dataclasses.replace(B200, flashinfer_version="0.6.3"), "0.6.3"),
        ("triton", dataclasses.replace(H200, triton_version=None), "'triton' package"),
    ],
)
def test_explicit_unavailable_raises_with_reason(request_name, caps, needle):
    with pytest.raises(BackendUnavailableError) as error:
        select_backend(request_name, caps)
    assert needle in str(error.value)
    assert request_name.split("_")[0] in str(error.value)


def test_explicit_activation_mismatch_raises():
    with pytest.raises(BackendUnavailableError, match="relu"):
        select_backend("flashinfer_routed", B200, activation="relu")


def test_explicit_runnable_backends():
    assert select_backend("reference", B200)[0] is Backend.REFERENCE
    assert select_backend("reference", CPU)[0] is Backend.REFERENCE
    assert select_backend("triton", H200)[0] is Backend.TRITON
    assert select_backend("flashinfer", B200)[0] is Backend.FLASHINFER_ROUTED  # alias
    assert select_backend(Backend.TRITON, H200)[0] is Backend.TRITON


@pytest.mark.parametrize("bad", ["cuda", "Triton", "", "cutlass"])
def test_unknown_name_raises_input_error(bad):
    with pytest.raises(MXFP8InputError, match="backend"):
        select_backend(bad, CPU)


def test_cutlass_is_explicit_only_and_names_its_requirement():
    assert select_backend("auto", B200)[0] is Backend.FLASHINFER_ROUTED  # auto prefers the routed kernel
    assert select_backend("flashinfer_cutlass", B200)[0] is Backend.FLASHINFER_CUTLASS
    for caps, needs in ((H200, "SM100/SM103"), (CPU, "flashinfer-python|SM100")):
        with pytest.raises(BackendUnavailableError, match=needs):
            select_backend("flashinfer_cutlass", caps)


def test_caps_must_be_devicecaps():
    with pytest.raises(MXFP8InputError, match="DeviceCaps"):
        select_backend("auto", {"device_type": "cpu"})


def test_every_backend_has_a_name_and_a_class():
    assert set(BACKEND_NAMES.values()) == set(Backend)
    assert set(BACKEND_CLASSES) == set(Backend)
    for backend, cls in BACKEND_CLASSES.items():
        assert cls.backend is backend
        assert isinstance(make_backend(backend), cls)


def test_support_checks_are_pure_values():
    support = ReferenceBackend.check_support(CPU)
    assert isinstance(support, Support) and support.ok and support == ReferenceBackend.check_support(CPU)  # a value
    assert isinstance(support.reason, str) and support.reason
    assert not TritonBackend.check_support(CPU).ok
    assert TritonBackend.check_support(H200).ok
    assert FlashInferRoutedBackend.check_support(B200).ok
    assert not FlashInferRoutedBackend.check_support(H200)  # Support is falsy when not ok


def test_device_caps_frozen_hashable_and_detect_on_cpu():
    assert len({CPU, dataclasses.replace(CPU)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        CPU.capability = (9, 0)
    assert H200.sm == 90 and H200.cuda_capability == (9, 0) and CPU.sm is None
    caps = detect_caps("cpu")
    assert caps.device_type == "cpu" and caps.capability is None and not caps.is_cuda


def test_triton_backend_names_a_triton_other_than_the_gpu_tested_one(caplog):
    """Selecting the Triton backend on an H200 with Triton 3.8 logs the untested-version warning once; 3.6 does not."""
    from megatron_mxfp8_moe.kernels import triton_support

    triton_support.warn_untested_triton.cache_clear()
    with caplog.at_level("WARNING", logger=triton_support.__name__):
        assert TritonBackend.check_support(dataclasses.replace(H200, triton_version="3.6.0")).ok
        assert not caplog.records
        assert TritonBackend.check_support(H200).ok and TritonBackend.check_support(H200).ok
    assert [r.getMessage() for r in caplog.records] == [triton_support.untested_triton_note("3.8.0")]


def test_auto_skips_an_installed_flashinfer_that_cannot_be_imported(monkeypatch):
    """The caps read the installed version only; a package whose import fails (a missing hard dependency) is not
    picked by auto, which falls through to the next backend with the import error in its reason."""
    import sys

    from megatron_mxfp8_moe.kernels import flashinfer_compat

    monkeypatch.undo()  # the real probe (the autouse fixture replaced it)
    flashinfer_compat.flashinfer_import_problem.cache_clear()
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer -> ImportError
    try:
        backend, reason = select_backend("auto", B200)
        assert backend is Backend.REFERENCE  # triton does not run on SM100 either
        assert "import flashinfer` fails" in reason
    finally:
        flashinfer_compat.flashinfer_import_problem.cache_clear()


def test_detect_caps_finds_triton_under_the_pytorch_nightly_distribution_name(monkeypatch):
    """PyTorch nightlies ship the ``triton`` module as the ``pytorch-triton`` distribution."""
    from megatron_mxfp8_moe.kernels import caps as caps_module

    versions = {"pytorch-triton": "3.8.0+git1234", "flashinfer-python": None}
    monkeypatch.setattr(caps_module, "_installed_version", lambda name: versions.get(name))
    assert detect_caps("cpu").triton_version == "3.8.0+git1234"
