"""On a GPU: MXFP8Experts inside Megatron's real MoELayer, captured in a CUDA graph and replayed with changing
valid-token counts, equals eager execution of the same layer (same backend, same inputs: bit-exact, since the
graph replays the very kernels eager runs launch and the backends are deterministic).

Setup: one process, NCCL world of 1, EP = 1, inference-optimized squared-ReLU config, NCCL-path inference
dispatcher. The first MoE layer's dispatcher normally ``fill_``s ``_valid_tokens_tensor`` with the row count
(a constant baked into the graph); this test turns that metadata sync off and writes the device tensor itself
between replays, as NVLS metadata would. ``backend="auto"`` picks triton on Hopper, flashinfer_routed on
SM100/SM103 (reference elsewhere). Bound vs the float64 oracle on the valid rows: 2e-2 (bf16 activations
inside the kernels and the bf16 layer output).
"""

import os
import socket

import pytest
import torch

pytestmark = pytest.mark.gpu

H, I, EXPERTS, TOPK, ROWS, CAPACITY = 256, 128, 8, 2, 16, 8


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def gpu_megatron():
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase

    torch.cuda.set_device(0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    saved = InferenceAllGatherDispatcherBase._valid_tokens_tensor
    InferenceAllGatherDispatcherBase._valid_tokens_tensor = torch.zeros(1, dtype=torch.int32, device="cuda")
    yield ProcessGroupCollection.use_mpu_process_groups()
    InferenceAllGatherDispatcherBase._valid_tokens_tensor = saved
    parallel_state.destroy_model_parallel()
    if owns:
        dist.destroy_process_group()


def _build_layer(pg_collection, token_capacity=None):
    from megatron.core.activations import squared_relu
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_mxfp8_moe.megatron import get_mxfp8_moe_layer_spec

    config = TransformerConfig(
        num_layers=1, hidden_size=H, num_attention_heads=4, ffn_hidden_size=2 * H, moe_ffn_hidden_size=I,
        num_moe_experts=EXPERTS, moe_router_topk=TOPK, moe_router_dtype="fp32", add_bias_linear=False,
        normalization="RMSNorm", params_dtype=torch.bfloat16, bf16=True, transformer_impl="inference_optimized",
        activation_func=squared_relu, gated_linear_unit=False, moe_token_dispatcher_type="allgather",
        inference_moe_token_dispatcher_type="nccl",
    )
    # the oracle reads the canonical weights, so keep them resident (release is tested in test_memory_gpu.py)
    layer = get_mxfp8_moe_layer_spec(backend="auto", token_capacity=token_capacity, shared_experts=None,
                                     release_canonical=False)(
        config=config, pg_collection=pg_collection
    ).cuda().eval()
    layer._inference_token_dispatcher._runs_metadata_sync = False  # the test owns _valid_tokens_tensor
    return layer


def _oracle(layer, x, valid):
    from megatron_mxfp8_moe.kernels.reference import moe_reference

    flat = x.view(-1, H)
    logits = flat.float() @ layer.router.weight.detach().float().T
    top_logits, ids = torch.topk(logits, TOPK, dim=-1)
    experts = layer.experts.expert_set
    return moe_reference(flat, experts.fc1, experts.fc2, torch.softmax(top_logits, -1), ids, "squared_relu",
                         valid_tokens=valid)


def _capture(layer, static_x, bounded_rows=None):
    from megatron.core.inference.utils import InferenceMode

    from megatron_mxfp8_moe.megatron import bounded_decode_rows

    def forward():
        if bounded_rows is None:
            return layer(static_x)[0]
        with bounded_decode_rows(decode_only=True, ep_token_bound=bounded_rows):
            return layer(static_x)[0]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), InferenceMode.active():
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: builds the expert stack, compiles the router
                forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = forward()
    return graph, static_out, forward


def _run_case(layer, valid_counts, bounded_rows=None, rows=ROWS):
    from megatron.core.inference.utils import InferenceMode
    from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase

    from megatron_mxfp8_moe.testing import relative_error

    valid_tensor = InferenceAllGatherDispatcherBase._valid_tokens_tensor
    static_x = torch.randn(rows, 1, H, dtype=torch.bfloat16, device="cuda")
    valid_tensor.fill_(rows)
    graph, static_out, forward = _capture(layer, static_x, bounded_rows)
    address = static_out.data_ptr()
    for valid in valid_counts:
        static_x.copy_(torch.randn(rows, 1, H, dtype=torch.bfloat16, device="cuda"))
        valid_tensor.fill_(valid)
        graph.replay()
        torch.cuda.synchronize()
        replayed = static_out.clone()
        with torch.inference_mode(), InferenceMode.active():
            eager = forward().clone()
        assert static_out.data_ptr() == address
        assert torch.equal(replayed, eager), f"valid={valid}: graph replay differs from eager"
        flat = replayed.view(rows, H)
        assert torch.isfinite(flat).all()
        assert torch.equal(flat[valid:], torch.zeros_like(flat[valid:])), f"valid={valid}: rows past valid written"
        oracle = _oracle(layer, static_x, valid)
        assert relative_error(flat[:valid], oracle[:valid]) <= 2e-2


def test_graph_replay_matches_eager_across_valid_counts(gpu_megatron):
    layer = _build_layer(gpu_megatron)
    _run_case(layer, valid_counts=[ROWS, 5, 1, 11, ROWS])
    assert layer.experts.layer.stack_state is not None


def test_graph_replay_with_the_second_stream(gpu_megatron):
    """64 rows top-2 over 8 experts (16 pairs per expert): the Triton tiles with 16-token tails on the second stream
    (``side_stream`` 2), so Megatron's layer is captured with the plane copy and the tail pair on another stream."""
    from megatron_mxfp8_moe.kernels.triton_moe import choose_config

    rows = 64
    if torch.cuda.get_device_capability()[0] == 9:  # "auto" picks triton on Hopper only
        assert choose_config(rows, H, I, gated=False, topk=TOPK, experts=EXPERTS).side_stream == 2
    layer = _build_layer(gpu_megatron)
    _run_case(layer, valid_counts=[rows, 37, 5, rows], rows=rows)


def test_a_row_bound_below_the_buffer_at_ep1_never_truncates_a_graph(gpu_megatron):
    """At EP = 1 every row of x can hold a token (the bound counts padded dispatcher rows): a bound of CAPACITY
    below ROWS falls back to full rows, so replays with more than CAPACITY valid rows stay exact."""
    from megatron_mxfp8_moe.megatron import bounded_decode_rows

    layer = _build_layer(gpu_megatron, token_capacity=CAPACITY)
    _run_case(layer, valid_counts=[CAPACITY, 3, ROWS, 11], bounded_rows=CAPACITY)
    with bounded_decode_rows(decode_only=True, ep_token_bound=CAPACITY):
        assert not layer.experts.uses_bounded_rows(ROWS)
    policy = layer.experts.layer.row_policy(ROWS, True)  # the kernel-level policy itself still bounds
    assert policy.bounded and policy.rows == CAPACITY


def test_refit_after_capture_reaches_replay(gpu_megatron):
    from megatron.core.inference.utils import InferenceMode
    from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase

    from megatron_mxfp8_moe.testing import relative_error

    layer = _build_layer(gpu_megatron)
    valid_tensor = InferenceAllGatherDispatcherBase._valid_tokens_tensor
    static_x = torch.randn(ROWS, 1, H, dtype=torch.bfloat16, device="cuda")
    valid_tensor.fill_(ROWS)
    graph, static_out, _ = _capture(layer, static_x)
    graph.replay()
    before = static_out.clone()
    for tensor in layer.experts.mxfp8_weights().values():  # refit in place, outside inference mode
        tensor.quantize_(torch.randn(tuple(tensor.shape), device="cuda") * 0.05)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(static_out, before) > 0.1
    assert relative_error(static_out.view(ROWS, H), _oracle(layer, static_x, ROWS)) <= 2e-2
    with torch.inference_mode(), InferenceMode.active():
        assert torch.equal(layer(static_x)[0], static_out)
