"""Static check of Hopper SASS for register-A wgmma hazards (a development check, not used at run time).

A ``wgmma.mma_async`` whose A operand comes from registers may read those registers until the ``wgmma.wait_group``
that retires it; PTX makes writing them earlier undefined. In SASS the wgmma is ``HGMMA`` (its A operand the second
register), groups end at an HGMMA marked ``gsb0``, and the wait is ``WARPGROUP.DEPBAR.LE gsb0, N``.
``register_a_hazards`` finds, in the K loop of ``nvdisasm -c`` output, writes to an HGMMA's A registers before a
DEPBAR that retires its group. Session 21 found such writes in every configuration of the session-20 Gluon kernels
(bench/NOTES_triton_moe.md) and in some of Triton's own pipelined dots (``bench/sass_hazard_scan.py``).
"""

from __future__ import annotations

import re

SASS_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
SASS_LABEL = re.compile(r"^\s*\.(L_x_\d+):")
NO_REGISTER_DEST = ("BAR", "BRA", "DEPBAR", "WARPGROUP", "SYNCS", "EXIT", "NOP", "STS", "STG", "ST", "STL", "RED",
                    "REDG", "ATOM", "UTMALDG", "UTMASTG", "UTMAPF", "UTMACCTL", "UBLKCP", "WARPSYNC", "BSYNC", "BSSY",
                    "CALL", "RET", "MEMBAR", "FENCE", "CCTL", "ERRBAR", "HGMMA")


def disassemble(cubin: bytes) -> str:
    """``nvdisasm -c`` of ``cubin`` with the installed Triton's own nvdisasm."""
    import os
    import subprocess
    import tempfile

    import triton.backends.nvidia

    tool = os.path.join(os.path.dirname(triton.backends.nvidia.__file__), "bin", "nvdisasm")
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/kernel.cubin"
        with open(path, "wb") as handle:
            handle.write(cubin)
        return subprocess.run([tool, "-c", path], capture_output=True, text=True, check=True).stdout


def written_registers(insn: str) -> set:
    """General registers an SASS instruction writes (its first operand; .64 / .WIDE write 2, .128 write 4)."""
    op, _, operands = re.sub(r"^@!?U?P[T0-9]+\s+", "", insn).partition(" ")
    first = re.fullmatch(r"R(\d+)", operands.split(",")[0].strip())
    if not operands or op.split(".")[0] in NO_REGISTER_DEST or not first:
        return set()
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    return {int(first.group(1)) + i for i in range(width)}


def _instructions(sass: str) -> tuple:
    """``(instructions, labels)`` of ``nvdisasm -c`` output: the instruction texts in order, and each label's index
    into them."""
    insns, labels = [], {}
    for line in sass.splitlines():
        if label := SASS_LABEL.match(line):
            labels[label.group(1)] = len(insns)
        elif insn := SASS_INSN.search(line):
            insns.append(insn.group(1).strip())
    return insns, labels


def _k_loop_spans(insns: list, labels: dict) -> list:
    """``(start, end)`` indices into ``insns`` of each K loop (``k_loops``), in program order."""
    spans = []
    for end, insn in enumerate(insns):
        branch = re.match(r"@!?P\d+\s+BRA\s+`\(\.(L_x_\d+)\)", insn)
        if branch and labels[branch.group(1)] < end:
            start = labels[branch.group(1)]
            if any(i.startswith("HGMMA") for i in insns[start:end]):
                spans.append((start, end))
    inner = [(a, b) for a, b in spans if not any((c, d) != (a, b) and a <= c and d <= b for c, d in spans)]
    assert inner, "no K loop around the HGMMAs"
    return sorted(inner)


def k_loops(sass: str) -> list:
    """The instructions of each K loop in ``nvdisasm -c`` output: every conditional backward branch around HGMMAs,
    from its target label to the branch, that holds no shorter such loop (session 29: a kernel with one- and
    two-factor K loops has two), in program order."""
    insns, labels = _instructions(sass)
    return [insns[a:b + 1] for a, b in _k_loop_spans(insns, labels)]


def k_loop(sass: str) -> list:
    """The shortest K loop (``k_loops``)."""
    return min(k_loops(sass), key=len)


def k_loop_paths(sass: str, marker: str = "HMUL2") -> tuple:
    """``(fewest, most)``: the instructions one iteration of the shortest K loop (``k_loops``) executes along the
    longest path with the fewest, and along the longest path with the most, ``marker`` instructions (conditional
    forward branches taken or not, backward branches inside the loop not followed). Session 29: a loop whose dequant
    branches (one or two scale factors) holds both branches, which its length counts; these count what one
    iteration runs."""
    insns, labels = _instructions(sass)
    start, end = min(_k_loop_spans(insns, labels), key=lambda span: span[1] - span[0])
    best = {start: ((0, 0), (0, 0))}  # index -> ((marks, -length) fewest, (marks, length) most): the longest of each
    for i in range(start, end + 1):
        if i not in best:
            continue
        (f_marks, f_len), (m_marks, m_len) = best[i]
        mark = int(insns[i].split()[0 if not insns[i].startswith("@") else 1].startswith(marker))
        here = ((f_marks + mark, f_len - 1), (m_marks + mark, m_len + 1))
        if i == end:
            return -here[0][1], here[1][1]
        branch = re.match(r"(@!?U?P\w+\s+)?BRA\s+`\(\.(L_x_\d+)\)", insns[i])
        targets = [i + 1]
        if branch:
            target = labels[branch.group(2)]
            targets = ([i + 1] if branch.group(1) else []) + ([target] if i < target <= end else [])
        for j in targets:
            old = best.get(j)
            best[j] = here if old is None else (min(old[0], here[0]), max(old[1], here[1]))
    raise AssertionError("the K loop's end is not reachable")


def register_a_hazards(sass: str) -> list:
    """``(hgmma, writer)`` pairs in each K loop (``k_loops``, walked as a cycle so the next iteration counts): an
    instruction writing one of an HGMMA's 4 A registers before a ``WARPGROUP.DEPBAR.LE gsb0, N`` with at least N
    groups committed after that HGMMA's group (PTX: reading or writing a wgmma's A registers before the wait_group
    that retires it is undefined)."""
    found = []
    for loop in k_loops(sass):
        found += _loop_hazards(loop)
    return found


def _loop_hazards(loop: list) -> list:
    """``register_a_hazards`` in one K loop."""
    found = []
    for i, hgmma in enumerate(loop):
        a_operand = re.match(r"HGMMA\.\S+\s+R\d+,\s+R(\d+),", hgmma)
        if not a_operand:
            continue
        registers = {int(a_operand.group(1)) + r for r in range(4)}
        closed, after = "gsb0" in hgmma, 0  # its group closes at the next gsb0-marked HGMMA
        for step in range(1, len(loop)):
            insn = loop[(i + step) % len(loop)]
            if insn.startswith("HGMMA"):
                after += int("gsb0" in insn and closed)
                closed = closed or "gsb0" in insn
                continue
            depbar = re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)", insn)
            if depbar and closed and after >= int(depbar.group(1), 16):
                break
            if written_registers(insn) & registers:
                found.append((hgmma, insn))
                break
    return found
