#!/usr/bin/env python
"""Greedy MoE decode with MXFP8 experts inside Megatron-Core's real MoELayer, with an RL refit part-way.

What it does (every number printed is measured in this run):

1. Builds a small MoE decoder from random weights (``--preset``): embedding -> per layer [RMSNorm -> causal
   decayed-running-state token mixer, RMSNorm -> Megatron-Core ``MoELayer``] -> RMSNorm -> LM head. The MoE
   blocks are Megatron's real ``MoELayer`` with ``InferenceTopKRouter``, Megatron's NCCL inference
   dispatcher (EP = 1) and this package's ``MXFP8Experts``; the other blocks are plain torch.
   ``tiny`` runs on a CPU in seconds (default there); ``qwen3-30b-a3b`` has Qwen3-30B-A3B's MoE geometry
   (hidden 2048, 128 experts, top-8, intermediate 768, SwiGLU, vocab 151936) with 4 layers (default on a GPU).
2. Quantizes the BF16 expert weights to MXFP8 and keeps the BF16 originals for the comparison.
3. Prefills a batch of random prompts (full rows), then decodes greedily. Decode steps run under
   ``bounded_decode_rows(True, bucket)`` when a token capacity is set (default: the decode bucket); the experts
   process the bounded row prefix only when that bound covers the bucket's padded rows and fits the capacity,
   else full rows (the printout says which; at EP = 1 the prefix is the whole bucket either way). On a GPU the whole decode step (embedding, mixers, MoE
   layers, LM head, argmax) is captured once per decode batch bucket as a CUDA graph and replayed.
4. Applies an RL refit part-way (``--refit-interval``; default once at the midpoint): a simulated training
   update ``W += 0.05 * std(W) * randn`` of the BF16 expert weights, streamed through ``refit_experts`` under
   Megatron names (``layers.{i}.mlp.experts.linear_fc1.weight{e}``); captured graphs keep replaying and see
   the new weights (storage addresses do not change).
5. Prints the backend and why, tokens/s, step latency (median, p90), MXFP8-vs-BF16 logits agreement
   (cosine, top-1) before and after each refit, how the refit moved the logits, the refit report, and the
   expert-weight memory of MXFP8 against BF16.

The BF16 reference is the same model with each MoELayer's experts swapped for ``moe_reference`` on the BF16
weights (fp32 math; same router, dispatcher and every other weight): a BF16 twin. Agreement is measured
teacher-forced over every position of the sequence decoded so far (full-sequence forward of both models);
after a refit the twin holds the UPDATED BF16 weights, so high agreement shows the refit landed. The
stale comparison (new MXFP8 vs old BF16) and the alignment of the two logit changes are printed too.

How tokens are routed, and why (Megatron-Core 0.19.2): gated SwiGLU experts (Qwen3) plus the inference
dispatcher. 0.19.2's ``transformer_impl="inference_optimized"`` rejects gated linear units because its own
``InferenceGroupedMLP`` has none; yet only that setting creates the inference token dispatcher (routed
contract: unpermuted rows, ``routing_map``, device valid-token count), which is what makes bounded decode rows
and CUDA-graph capture possible. The standard allgather dispatcher (the other way to run gated experts: a
``transformer_impl="local"`` config in eval) permutes tokens with data-dependent shapes (host syncs), so it
cannot be captured, and its permuted contract has no bounded rows. So the MoELayer is built from an
inference-optimized config with a non-gated placeholder activation, and the experts get
``MXFP8Experts(activation="swiglu")`` through ``get_mxfp8_moe_layer_spec(..., activation="swiglu")`` (the
router, dispatcher and combine never read the activation). Work-around for a 0.19.2 validation, stated, not hidden.

EP = 1 and CUDA graphs: the NCCL inference dispatcher ``fill_``s the valid-token count with the row count in
every MoE layer; inside a captured decode step that is the bucket size, a constant, which is right here
because every bucket row is processed (padding rows of a bucket carry token 0 and are discarded).

CPU: Megatron's router and dispatcher assume CUDA; ``_decode_model.apply_cpu_shim`` applies the minimal shim
(``torch.cuda.current_device -> "cpu"``, a CPU valid-token tensor, router ``torch.compile`` off). No graphs.

Run: ``python examples/decode.py`` (``make demo``); ``--help`` for the flags.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings

_T0 = time.perf_counter()  # start-up is timed from here (torch and Megatron imports included)

# Megatron warns at import about optional packages (Transformer Engine, Apex, absl) the demo does not use.
warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.core\..*")
warnings.filterwarnings("ignore", message=r".*(Transformer Engine|absl\.logging|Apex).*")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _decode_model as dm  # noqa: E402
import torch  # noqa: E402

REFIT_NOISE = 0.05  # simulated training update: W += REFIT_NOISE * std(W) * randn



def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Greedy MoE decode with MXFP8 experts in Megatron-Core's MoELayer, with an RL refit part-way.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--preset", choices=sorted(dm.PRESETS), default=None,
                        help="model preset (default: tiny on a CPU, qwen3-30b-a3b on a GPU)")
    parser.add_argument("--backend", default="auto", choices=["auto", "reference", "triton", "flashinfer_routed", "flashinfer_cutlass"],
                        help="MXFP8 expert backend")
    parser.add_argument("--batch-size", type=int, default=None, help="prompts decoded together (default: preset's)")
    parser.add_argument("--prompt-len", type=int, default=None, help="prompt tokens per request (default: preset's)")
    parser.add_argument("--steps", type=int, default=None, help="decode steps (default: preset's)")
    parser.add_argument("--token-capacity", type=int, default=None,
                        help="bounded decode-row capacity of the experts (default: the decode bucket; 0 disables)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when available, else cpu")
    parser.add_argument("--refit-interval", type=int, default=None,
                        help="refit every N decode steps; 0 disables (default: once at the midpoint)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, prompts and refit updates")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="run decode steps eagerly on a GPU")
    args = parser.parse_args(argv)
    for name in ("batch_size", "prompt_len", "steps"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.token_capacity is not None and args.token_capacity < 0:
        parser.error("--token-capacity must be >= 0")
    if args.refit_interval is not None and args.refit_interval < 0:
        parser.error("--refit-interval must be >= 0")
    return args


class _OncePerMessage(logging.Filter):
    """Drops a record whose exact text was already shown (e.g. the same backend line for every layer)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def configure_logging() -> None:
    """Library messages (backend choice, row policy, refit) at INFO, each text once; the rest at WARNING."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("  [%(name)s] %(message)s"))
    handler.addFilter(_OncePerMessage())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("megatron_mxfp8_moe").setLevel(logging.INFO)
    # torch warns at import that a CPU-only machine has no CUDA runtime for C++ extensions: not used here.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


def refit_steps(steps: int, interval) -> list[int]:
    """Decode steps before which a refit runs."""
    if interval is None:
        return [steps // 2] if steps >= 2 else []
    if interval == 0:
        return []
    return list(range(interval, steps, interval))


def fmt_bytes(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count} B"


def fmt_agreement(a: "dm.Agreement") -> str:
    return (f"cosine median {a.cosine_median:.5f} (mean {a.cosine_mean:.5f}, min {a.cosine_min:.5f}), "
            f"top-1 {100 * a.top1:.1f}%")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def teacher_forced(model, tokens, reference_experts, capacity):
    """(MXFP8 logits, BF16-twin logits) of a full-sequence forward over ``tokens [B, T]`` (full rows)."""
    from megatron.core.inference.utils import InferenceMode

    from megatron_mxfp8_moe import bounded_decode_rows

    rows = tokens.numel()
    with torch.no_grad(), InferenceMode.active(), bounded_decode_rows(False, rows):
        mxfp8, _ = model.forward_sequence(tokens)
        with dm.use_experts(model, reference_experts):
            bf16, _ = model.forward_sequence(tokens)
    return mxfp8, bf16


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_logging()
    if args.device == "auto":
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    elif args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: --device cuda but no CUDA device is visible", file=sys.stderr)
            return 2
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    preset_name = args.preset or ("qwen3-30b-a3b" if device.type == "cuda" else "tiny")
    preset = dict(dm.PRESETS[preset_name])
    batch = args.batch_size or preset["batch"]
    prompt_len = args.prompt_len or preset["prompt_len"]
    steps = args.steps or preset["steps"]
    bucket = dm.decode_bucket(batch)
    capacity = bucket if args.token_capacity is None else (args.token_capacity or None)
    use_graphs = device.type == "cuda" and not args.no_cuda_graphs

    started = _T0
    import megatron.core  # noqa: F401  (import cost is part of the start-up)
    from megatron.core.inference.utils import InferenceMode
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from megatron_mxfp8_moe import bounded_decode_rows, refit_experts

    try:
        from importlib.metadata import version

        mcore_version = version("megatron-core")
    except Exception:  # a source tree on PYTHONPATH has no distribution metadata
        mcore_version = getattr(megatron.core, "__version__", "unknown")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"== megatron_mxfp8_moe decode demo: preset {preset_name} on {where} "
          f"(torch {torch.__version__}, megatron-core {mcore_version})")
    print(f"model: {preset['layers']} layers, hidden {preset['hidden']}, {preset['experts']} experts top-{preset['topk']}, "
          f"expert intermediate {preset['intermediate']} (SwiGLU), vocab {preset['vocab']}; "
          f"batch {batch}, prompt {prompt_len}, {steps} decode steps")

    pg_collection = dm.setup_megatron(device)
    try:
        config = dm.build_config(preset, device)
        torch.manual_seed(args.seed)
        try:
            model = dm.MoEDecoder(preset, config, pg_collection, backend=args.backend, token_capacity=capacity,
                                  device=device)
        except Exception as error:  # e.g. BackendUnavailableError for an explicit --backend this machine lacks
            print(f"error: could not build the MXFP8 experts: {type(error).__name__}: {error}", file=sys.stderr)
            return 2
        model = model.to(device).eval()
        generator = torch.Generator(device=device).manual_seed(args.seed)
        stacks = dm.init_weights_(model, preset, generator)
        reference = [dm.BF16RoutedExperts(fc1, fc2) for fc1, fc2 in stacks]
        experts0 = model.layers[0].mlp.experts
        dispatcher = type(model.layers[0].mlp._inference_token_dispatcher).__name__
        print(f"MoE block: Megatron-Core {type(model.layers[0].mlp).__name__} + {type(model.layers[0].mlp.router).__name__}"
              f" + {dispatcher} (EP=1) + {type(experts0).__name__} "
              f"({experts0.expert_set.activation.value}; gated experts via MXFP8Experts(activation=...), see docstring)")
        print(f"backend: {experts0.backend.value} -- {experts0.layer.backend_reason}")
        if capacity is None:
            decode_rows = "full (no token capacity)"
        else:  # ask the experts what the decode step's bounded_decode_rows(True, bucket) block gives them
            with bounded_decode_rows(True, bucket):
                bounded = experts0.uses_bounded_rows(bucket)
            decode_rows = (f"bounded prefix of {min(capacity, bucket)} of {bucket} rows under bounded_decode_rows(True, "
                           f"{bucket})" if bounded else
                           f"full {bucket} rows: bounded_decode_rows(True, {bucket}) does not qualify for capacity "
                           f"{capacity} (the bound counts the bucket's padded rows and must fit the capacity)")
        print(f"token capacity: {capacity if capacity is not None else 'none'} "
              f"(decode rows: {decode_rows}; prefill: full rows)")
        print(f"setup: {time.perf_counter() - started:.1f} s")

        # -- prefill ---------------------------------------------------------------------------------------
        prompts = torch.randint(0, preset["vocab"], (batch, prompt_len), generator=generator, device=device)
        sync(device)
        start = time.perf_counter()
        with torch.no_grad(), InferenceMode.active(), bounded_decode_rows(False, prompts.numel()):
            logits, states = model.forward_sequence(prompts)
        next_tokens = logits[:, -1].argmax(-1)
        sync(device)
        prefill_s = time.perf_counter() - start
        print(f"prefill: {batch} x {prompt_len} tokens in {1e3 * prefill_s:.1f} ms "
              f"({prompts.numel() / prefill_s:.0f} tokens/s; eager, first forward: includes stack build and JIT)")
        memory = dm.expert_memory(model)  # after the first forward built the kernel stacks
        mxfp8_logits, bf16_logits = teacher_forced(model, prompts, reference, capacity)
        print(f"agreement MXFP8 vs BF16 on the prompts ({prompts.numel()} positions): "
              f"{fmt_agreement(dm.logits_agreement(mxfp8_logits, bf16_logits))}")

        # -- decode set-up: static buffers, CUDA graph per bucket --------------------------------------------
        runner = dm.DecodeRunner(model, batch, device, use_graphs=use_graphs, token_capacity=capacity)
        runner.load_states_(states)
        if use_graphs:
            start = time.perf_counter()
            try:
                runner.capture_()
                print(f"CUDA graphs: captured the whole decode step (embedding, {preset['layers']} x [mixer + MoELayer],"
                      f" LM head, argmax) for bucket {bucket} (batch {batch}) in {time.perf_counter() - start:.1f} s")
            except Exception as error:  # keep the demo useful: fall back to eager decode, say so
                runner.use_graphs = use_graphs = False
                runner.load_states_(states)
                print(f"CUDA graphs: capture FAILED ({type(error).__name__}: {error}); decoding eagerly")
        else:
            reason = "CPU" if device.type == "cpu" else "--no-cuda-graphs"
            print(f"CUDA graphs: off ({reason}); eager decode steps over bucket {bucket} (batch {batch})")

        # -- decode loop with refits -----------------------------------------------------------------------
        refit_at = set(refit_steps(steps, args.refit_interval))
        fed = [next_tokens]  # tokens fed to the decoder, in order (the prompt excluded)
        latencies, refits = [], []
        # library log lines (row policy, refit) go above the bar, not through it
        with logging_redirect_tqdm(), tqdm(total=steps, desc="decode", unit="step", file=sys.stderr,
                                           dynamic_ncols=True, leave=False) as bar:
            for step in range(steps):
                if step in refit_at:
                    sequence = torch.cat([prompts, torch.stack(fed[:-1], dim=1)], dim=1) if len(fed) > 1 else prompts
                    old_q, old_r = teacher_forced(model, sequence, reference, capacity)
                    stream = dm.perturbed_stream(stacks, REFIT_NOISE, generator)
                    report = refit_experts(model, stream)
                    new_q, new_r = teacher_forced(model, sequence, reference, capacity)
                    refits.append(dict(
                        step=step, report=report, positions=sequence.numel(),
                        before=dm.logits_agreement(old_q, old_r), after=dm.logits_agreement(new_q, new_r),
                        stale=dm.logits_agreement(new_q, old_r), moved=dm.logits_agreement(new_q, old_q),
                        alignment=dm.delta_alignment(new_q, old_q, new_r, old_r),
                    ))
                    bar.set_postfix_str(f"refit @ step {step}")
                sync(device)
                start = time.perf_counter()
                next_tokens = runner.step_(fed[-1])
                sync(device)
                latencies.append(time.perf_counter() - start)
                fed.append(next_tokens.clone())
                bar.update(1)

        # -- consistency of the decoded tokens with an eager teacher-forced re-run (graphs included) --------
        sequence = torch.cat([prompts, torch.stack(fed[:-1], dim=1)], dim=1)
        final_q, final_r = teacher_forced(model, sequence, reference, capacity)
        decoded = torch.stack(fed[1:], dim=1)  # [B, steps]: what each decode step chose
        after_last_refit = max(refit_at) if refit_at else 0
        window = slice(prompt_len + after_last_refit, prompt_len + steps)
        eager_logits = final_q[:, window]
        chosen = decoded[:, after_last_refit:]
        eager_choice = eager_logits.argmax(-1)
        consistency = float((eager_choice == chosen).double().mean())
        # for a mismatch: how far the decoded token's eager logit is below the eager argmax (0 = exact tie)
        gaps = (eager_logits.max(-1).values - eager_logits.gather(-1, chosen.unsqueeze(-1)).squeeze(-1))
        gap_note = (f"; each other token's eager logit is within {float(gaps.max()):.2g} of the maximum "
                    f"(logit std {float(eager_logits.std()):.2f}): a near-tie" if consistency < 1 else "")

        # -- report ------------------------------------------------------------------------------------------
        total = sum(latencies)
        ordered = sorted(latencies)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else 0.5 * sum(ordered[len(ordered) // 2 - 1:len(ordered) // 2 + 1])
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(f"decode: {steps} steps x {batch} requests in {total:.3f} s "
              f"({'CUDA graph replay' if use_graphs else 'eager'}; refit and comparisons excluded)")
        print(f"tokens/s: {batch * steps / total:.1f}")
        print(f"step latency: median {1e3 * median:.2f} ms, p90 {1e3 * p90:.2f} ms")
        for refit in refits:
            report = refit["report"]
            print(f"refit before step {refit['step']}: {report.tensors_updated} tensors of {report.experts_updated} experts "
                  f"in {len(report.modules_touched)} modules, {fmt_bytes(report.bytes_written)} canonical in "
                  f"{1e3 * report.seconds:.1f} ms (stream of Megatron names, W += {REFIT_NOISE} * std * randn)")
            print(f"  agreement before refit (MXFP8 vs BF16, {refit['positions']} positions): {fmt_agreement(refit['before'])}")
            print(f"  agreement after refit  (MXFP8 vs updated BF16): {fmt_agreement(refit['after'])}")
            print(f"  stale check            (MXFP8 vs pre-refit BF16): {fmt_agreement(refit['stale'])}")
            moved = refit["moved"]
            print(f"  refit changed the MXFP8 logits: cosine to before {moved.cosine_median:.5f} (median), "
                  f"top-1 changed at {100 * (1 - moved.top1):.1f}% of positions; "
                  f"alignment with the BF16 change: cosine {refit['alignment']:.4f} (median)")
        if not refits:
            print("refit: disabled (--refit-interval 0)" if args.refit_interval == 0 else
                  f"refit: none ran (no step before {steps} is a refit step with --refit-interval "
                  f"{args.refit_interval if args.refit_interval is not None else 'default: half way'})")
        print(f"agreement at the end (MXFP8 vs BF16, {sequence.numel()} positions): "
              f"{fmt_agreement(dm.logits_agreement(final_q, final_r))}")
        print(f"decode vs eager re-run: {100 * consistency:.1f}% of the {chosen.numel()} tokens decoded "
              f"{'since the last refit' if refits else 'in all'} are the argmax of an eager teacher-forced "
              f"forward{gap_note}")
        print(f"expert weights: {memory.weights:,} weights; BF16 {fmt_bytes(memory.bf16_bytes)} -> MXFP8 canonical "
              f"{fmt_bytes(memory.canonical_bytes)} (ratio {memory.ratio:.3f}; fp8 data + E8M0 scales incl. padding)")
        extra_note = ("the reference backend keeps an fp32 dequantized copy" if experts0.backend.value == "reference"
                      else "kernel layout storage beyond the canonical bytes")
        print(f"kernel stack extra: {fmt_bytes(memory.stack_extra_bytes)} "
              f"({memory.stack_extra_bytes / memory.bf16_bytes:.3f} x BF16; {extra_note})")
        sample = decoded[0, : min(12, steps)].tolist()
        print(f"request 0 decoded tokens: {sample}{' ...' if steps > 12 else ''}")
        print(f"total wall time: {time.perf_counter() - started:.1f} s")
    finally:
        dm.teardown_megatron()
    return 0


if __name__ == "__main__":
    sys.exit(main())
