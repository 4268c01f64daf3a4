"""bench/moe_layer.py: the compile processes it starts before timing fit the GPU's free memory."""

import importlib.util
import pathlib

GIB = 2**30


def _moe_layer():
    path = pathlib.Path(__file__).resolve().parents[3] / "bench" / "moe_layer.py"
    spec = importlib.util.spec_from_file_location("bench_moe_layer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_warm_workers_fit_free_memory():
    bench = _moe_layer()
    shapes = list(bench.SHAPES)
    # an H200's free memory holds seven processes of each shape; an H100's (run 44's OOM: 7 x 12.6 GiB of 235b) not
    assert bench.warm_workers_per_shape(shapes, 14, 139 * GIB) == {"qwen3-30b-a3b": 7, "qwen3-235b-a22b": 7}
    on_h100 = bench.warm_workers_per_shape(shapes, 14, 79 * GIB)
    assert on_h100 == {"qwen3-30b-a3b": 7, "qwen3-235b-a22b": 3}
    assert sum(on_h100[n] * bench.warm_worker_bytes(n) for n in shapes) <= 0.9 * 79 * GIB
    # never below one process per shape, even where nothing fits
    assert bench.warm_workers_per_shape(shapes, 14, 1 * GIB) == {name: 1 for name in shapes}
    assert bench.warm_worker_bytes("qwen3-235b-a22b") == 16 * 128 * 4096 * 1536 + GIB
