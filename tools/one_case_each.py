"""Run the first collected case of every test function in the given test files, or part ``K/N`` of that list.

For checks after a refactor that changes no kernel: each test function (each launch path it covers) runs once, at a
small fraction of the parametrized suite's device time. Usage (pytest's exit status is returned):

    python tools/one_case_each.py tests/functional/test_triton_moe_gpu.py --part 1/3 [--skip S] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest


def first_cases(files: list[str]) -> list[str]:
    """The first node id of each test function of ``files``, in collection order."""
    listing = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                             capture_output=True, text=True, check=False).stdout
    seen, ids = set(), []
    for line in listing.splitlines():
        if "::" not in line:
            continue
        function = line.split("[", 1)[0]
        if function not in seen:
            seen.add(function)
            ids.append(line.strip())
    return ids


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--part", default="1/1", help="K/N: the K-th of N equal slices of the list")
    parser.add_argument("--skip", type=int, default=0, help="leave out the part's first SKIP functions (run before)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_known_args(argv[:cut])
    extra += argv[cut + 1:]  # pytest's own arguments, after "--" (argparse would take them for files)
    k, n = map(int, args.part.split("/"))
    ids = first_cases(args.files)
    if not ids:
        print("one_case_each: no tests collected", file=sys.stderr)
        return 1
    part = ids[(k - 1) * len(ids) // n:k * len(ids) // n][args.skip:]
    print(f"one_case_each: {len(part)} of {len(ids)} test functions (part {k}/{n})", flush=True)
    return pytest.main(["-v", "-p", "no:cacheprovider", *extra, *part])


if __name__ == "__main__":
    sys.exit(main())
