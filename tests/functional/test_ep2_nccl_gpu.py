"""EP = 2 over NCCL on two GPUs: Megatron's real MoELayer + InferenceTopKRouter + NCCL inference dispatcher with
MXFP8Experts on the auto backend, captured in a CUDA graph and replayed with new tokens; replay equals eager and
both equal a float64 reference over all ranks' experts. Squared ReLU and SwiGLU (``activation=`` override).

Needs two CUDA GPUs (marker ``multigpu``); run on 2 x H200 (tools/gpu_final_x2.sh).
"""

import json
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

H, I, EXPERTS, TOPK, TOKENS = 256, 128, 8, 2, 8
BOUND = 2e-2  # bf16 activations and the dispatcher's bf16 combine; MXFP8 weights enter exactly (dequantized)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _case(pgc, activation: str) -> dict:
    import torch.nn.functional as F
    from megatron.core.inference.utils import InferenceMode
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_mxfp8_moe import get_mxfp8_moe_layer_spec, moe_reference
    from megatron_mxfp8_moe.testing import relative_error

    def squared_relu(x):
        return F.relu(x).square()

    config = TransformerConfig(
        num_layers=1, hidden_size=H, num_attention_heads=4, ffn_hidden_size=2 * H, moe_ffn_hidden_size=I,
        num_moe_experts=EXPERTS, moe_router_topk=TOPK, moe_router_dtype="fp32", add_bias_linear=False,
        normalization="RMSNorm", params_dtype=torch.bfloat16, bf16=True, transformer_impl="inference_optimized",
        activation_func=squared_relu, gated_linear_unit=False, moe_token_dispatcher_type="allgather",
        inference_moe_token_dispatcher_type="nccl",
    )
    torch.manual_seed(0)  # the same router on both ranks
    spec = get_mxfp8_moe_layer_spec(backend="auto", shared_experts=None, release_canonical=False, activation=activation)
    layer = spec(config=config, pg_collection=pgc).cuda().eval()
    experts = layer.experts
    torch.manual_seed(100 + experts.ep_rank)  # different experts and tokens per rank
    for tensor in experts.mxfp8_weights().values():
        tensor.quantize_(torch.randn(tuple(tensor.shape), device="cuda") * 0.05)
    static_x = torch.randn(TOKENS, 1, H, dtype=torch.bfloat16, device="cuda")

    with torch.inference_mode(), InferenceMode.active():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                layer(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = layer(static_x)[0]
        errors, equal = [], True
        for _ in range(2):
            static_x.copy_(torch.randn_like(static_x))
            graph.replay()
            torch.cuda.synchronize()
            replayed = static_out.clone()
            eager = layer(static_x)[0]
            equal = equal and torch.equal(replayed, eager)
            fc1, fc2 = experts.expert_set.dequantize(torch.float64)
            gathered = [[torch.empty_like(fc1) for _ in range(2)], [torch.empty_like(fc2) for _ in range(2)]]
            dist.all_gather(gathered[0], fc1)
            dist.all_gather(gathered[1], fc2)
            logits = static_x.view(-1, H).float() @ layer.router.weight.float().T
            top_logits, ids = torch.topk(logits, TOPK, dim=-1)
            oracle = moe_reference(static_x.view(-1, H), torch.cat(gathered[0]), torch.cat(gathered[1]),
                                   torch.softmax(top_logits, -1), ids, activation)
            errors.append(relative_error(replayed.view(-1, H), oracle))
    return {"rank": experts.ep_rank, "offset": experts.local_expert_offset, "backend": experts.backend.value,
            "replay_equals_eager": bool(equal), "max_error": max(errors)}


def _worker(rank: int, port: int, result_dir: str) -> None:
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.token_dispatcher_inference import NCCLAllGatherDispatcher

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    try:
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=2)
        # What DynamicInferenceContext does at model init: the device int32 [1] valid-token count that the
        # NCCL dispatcher fill_s every step and the experts read (a stable address, outside any capture).
        NCCLAllGatherDispatcher.allocate_buffers()
        pgc = ProcessGroupCollection.use_mpu_process_groups()
        results = {activation: _case(pgc, activation) for activation in ("squared_relu", "swiglu")}
        with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as handle:
            json.dump(results, handle)
        parallel_state.destroy_model_parallel()
    finally:
        dist.destroy_process_group()


def test_ep2_nccl_graph_replay_matches_eager_and_reference(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for activation, result in results.items():
            assert result["rank"] == rank and result["offset"] == rank * EXPERTS // 2, (activation, result)
            assert result["replay_equals_eager"], (activation, result)
            assert result["max_error"] <= BOUND, (activation, result)
