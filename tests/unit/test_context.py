"""Decode-only knowledge for bounded rows: explicit block, attached inference context, EP agreement."""

import os
import socket
import types

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.megatron import context


@pytest.fixture(autouse=True)
def _clean_context():
    context.detach_inference_context()
    yield
    context.detach_inference_context()


class FakeDynamicContext:
    """The three things MXFP8Experts reads from Megatron's DynamicInferenceContext."""

    def __init__(self, decode_only, token_count, graph=True):
        self._decode_only, self._graph = decode_only, graph
        self.padded_batch_dimensions = types.SimpleNamespace(token_count=token_count)

    def is_decode_only(self):
        return self._decode_only

    def using_cuda_graph_this_step(self):
        return self._graph


def test_nothing_known_means_full_rows():
    assert context.current_decode_rows() == context.DecodeRows(False, None, "none")
    assert not context.use_bounded_rows(64)


def test_explicit_block_sets_and_restores():
    with context.bounded_decode_rows(True, 8) as rows:
        assert rows == context.DecodeRows(True, 8, "bounded_decode_rows")
        assert context.use_bounded_rows(8) and context.use_bounded_rows(64)
        assert not context.use_bounded_rows(7)  # bound above capacity: full rows
        assert not context.use_bounded_rows(None)  # no capacity configured
        with context.bounded_decode_rows(False, 8):
            assert not context.use_bounded_rows(64)
        assert context.use_bounded_rows(8)
    assert context.current_decode_rows().source == "none"


def test_explicit_block_wins_over_attached_context():
    ctx = FakeDynamicContext(decode_only=True, token_count=4)
    context.attach_inference_context(ctx)
    with context.bounded_decode_rows(False, 4):
        assert not context.use_bounded_rows(16)
    assert context.use_bounded_rows(16)


def test_attached_context_ep1():
    ctx = FakeDynamicContext(decode_only=True, token_count=16)
    context.attach_inference_context(ctx)
    assert context.current_decode_rows() == context.DecodeRows(True, 16, "inference-context")
    assert context.use_bounded_rows(16) and not context.use_bounded_rows(15)
    ctx._decode_only = False
    assert not context.use_bounded_rows(16)


def test_attached_context_ep2_trusts_only_nccl_graph_steps():
    ctx = FakeDynamicContext(decode_only=True, token_count=8, graph=True)
    context.attach_inference_context(ctx)
    nccl = context.current_decode_rows(ep_size=2, nccl_dispatcher=True)
    assert nccl.decode_only and nccl.ep_token_bound == 16  # equal per-rank counts in NCCL graphs
    assert context.use_bounded_rows(16, ep_size=2, nccl_dispatcher=True)
    assert not context.use_bounded_rows(15, ep_size=2, nccl_dispatcher=True)
    assert not context.use_bounded_rows(1024, ep_size=2, nccl_dispatcher=False)  # NVLS: no agreement
    ctx._graph = False
    assert not context.use_bounded_rows(1024, ep_size=2, nccl_dispatcher=True)  # NCCL eager step


def test_attached_context_is_weak_and_checked():
    ctx = FakeDynamicContext(True, 4)
    context.attach_inference_context(ctx)
    assert context.attached_inference_context() is ctx
    del ctx
    assert context.attached_inference_context() is None
    with pytest.raises(MXFP8InputError, match="DynamicInferenceContext"):
        context.attach_inference_context(object())


def test_unagreed_rows_give_full_rows_for_an_ep_layer(caplog):
    with context.bounded_decode_rows(True, 8) as rows:  # no ep_group: agreed by this rank alone
        assert rows.group_size == 1
        assert context.use_bounded_rows(8)  # fine for an EP = 1 layer
        assert not context.use_bounded_rows(8, ep_size=2, nccl_dispatcher=True)
        assert not context.use_bounded_rows(8, ep_size=2, nccl_dispatcher=False)
    assert "agreed over 1 rank(s), but the layer's EP size is 2" in caplog.text


def test_bound_below_the_required_rows(caplog):
    with context.bounded_decode_rows(True, 8):
        assert context.use_bounded_rows(16, required_rows=8)
        assert not context.use_bounded_rows(16, required_rows=9)  # EP = 1: every rank falls back alike
    assert "ep_token_bound=8 is below the 9 dispatcher rows" in caplog.text
    ctx = FakeDynamicContext(decode_only=True, token_count=4, graph=True)
    context.attach_inference_context(ctx)
    assert context.current_decode_rows(ep_size=2, nccl_dispatcher=True).group_size == 2  # EP-matched graphs
    assert context.use_bounded_rows(16, ep_size=2, nccl_dispatcher=True, required_rows=8)
    assert not context.use_bounded_rows(16, ep_size=2, nccl_dispatcher=True, required_rows=10)


def test_bad_bound_raises():
    with pytest.raises(MXFP8InputError, match="ep_token_bound"):
        with context.bounded_decode_rows(True, -1):
            pass


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _agreement_worker(rank, port, cases, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        group = dist.new_group([0, 1])
        for decode_flags, bounds in cases:
            with context.bounded_decode_rows(decode_flags[rank], bounds[rank], ep_group=group) as rows:
                results[(rank, decode_flags, bounds)] = (rows.decode_only, rows.ep_token_bound, context.use_bounded_rows(12))
                results[(rank, decode_flags, bounds, "group")] = rows.group_size
                try:  # NVLS: a bound below this rank's own rows cannot fall back alone
                    context.use_bounded_rows(64, ep_size=2, nccl_dispatcher=False, required_rows=rows.ep_token_bound + 1)
                    results[(rank, decode_flags, bounds, "nvls")] = "accepted"
                except MXFP8InputError as error:
                    results[(rank, decode_flags, bounds, "nvls")] = str(error)
    finally:
        dist.destroy_process_group()


def test_ep_agreement_over_two_gloo_ranks():
    cases = [((True, True), (8, 12)), ((True, False), (4, 4)), ((False, False), (2, 3)), ((True, True), (8, 20))]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_agreement_worker, args=(_free_port(), cases, results), nprocs=2, join=True)
        results = dict(results)
    for flags, bounds in cases:
        expected_decode = all(flags)
        expected_bound = max(bounds)
        for rank in range(2):
            assert results[(rank, flags, bounds)] == (expected_decode, expected_bound, expected_decode and expected_bound <= 12)
            assert results[(rank, flags, bounds, "group")] == 2
            nvls = results[(rank, flags, bounds, "nvls")]
            assert ("dispatcher rows" in nvls) if expected_decode else nvls == "accepted"
