"""The GPU tests build their Triton configs before their first CUDA call, so that ``make test``'s host-side step
(``tools/host_side_of_gpu_tests.py``, which stops each GPU test at that call) checks them on the CPU: a stale tile
name or an invalid ``dataclasses.replace`` fails the build instead of waiting for a GPU.

A static check (``ast``) of every function in ``tests/functional/*_gpu.py``: after the first statement that touches
CUDA (a ``"cuda"`` literal, ``.cuda()``, or a call of a function of the file that does), no statement of the same
body may build a config (``dataclasses.replace``, ``TritonMoEConfig``, ``choose_config`` and the tests' own config
helpers). Lambdas are skipped (their bodies run later, where their caller decides)."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_BUILDERS = {"TritonMoEConfig", "choose_config", "_mma_config", "_one_factored", "_dependent_launched"}


def _called(node):
    """Names of the functions ``node`` calls (``dataclasses.replace`` as "dataclasses.replace"), lambdas skipped."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                yield f"{f.value.id}.{f.attr}" if isinstance(f.value, ast.Name) else f.attr
            elif isinstance(f, ast.Name):
                yield f.id
        stack.extend(ast.iter_child_nodes(n))


def _mentions_cuda(node) -> bool:
    return any((isinstance(n, ast.Constant) and n.value == "cuda") or
               (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "cuda")
               for n in ast.walk(node))


def late_configs(source: str, path: str = "<source>") -> list[str]:
    """``path:line function`` of each statement that builds a config after its function first touched CUDA."""
    functions = {f.name: f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}
    touching = {name for name, f in functions.items() if _mentions_cuda(f)}
    grown = True
    while grown:  # functions that call a CUDA-touching function of the file touch CUDA too
        grown = False
        for name, f in functions.items():
            if name not in touching and touching & set(_called(f)):
                touching.add(name)
                grown = True
    found = []
    for name, f in functions.items():
        touched = False
        for statement in f.body:
            calls = set(_called(statement))
            if touched and (calls & CONFIG_BUILDERS or "dataclasses.replace" in calls):
                found.append(f"{path}:{statement.lineno} {name}")
            touched = touched or _mentions_cuda(statement) or bool(calls & touching)
    return found


def test_the_check_finds_a_config_built_after_cuda():
    source = '''
def _inputs():
    return torch.randn(4, device="cuda")

def test_late():
    x = _inputs()
    cfg = dataclasses.replace(choose_config(4, 8, 8), dequant="cvt")

def test_early():
    cfg = dataclasses.replace(choose_config(4, 8, 8), dequant="cvt")
    x = _inputs()
    run(x, lambda: dataclasses.replace(cfg, dequant="bits"))
'''
    assert late_configs(source) == ["<source>:7 test_late"]


def test_gpu_tests_build_their_configs_before_cuda():
    paths = sorted(glob.glob(os.path.join(ROOT, "tests", "functional", "*_gpu.py")))
    assert paths, "no GPU test files found"
    found = [hit for path in paths
             for hit in late_configs(open(path).read(), os.path.relpath(path, ROOT))]
    assert not found, "configs built after the first CUDA call (move them up):\n" + "\n".join(found)
