"""Where a kernel's time goes, from Nsight Compute's SASS source page (tools/gpu_routine.sh's ncu step).

    python3 tools/ncu_sass_summary.py REPORT_sass.csv [--regions_csv=OUT.csv] [--opcodes_csv=OUT.csv]

The page (``ncu --import R.ncu-rep --csv --page source --print-source sass``) lists each SASS instruction
with its warp stall samples (``Warp Stall Sampling (All Samples)``), the samples per stall reason
(``stall_*``) and how many times warps executed it. Printed:

- per opcode (the mnemonic before its first dot, predicates dropped): its share of the samples and of the
  executed instructions;
- per region, the instructions from one barrier (``BAR.SYNC``, ``BAR.ARV``, ``BAR.RED``) to the next: its
  instructions (indices on the page, from 0), its share of the samples and of the executed instructions, and
  its three largest stall reasons (as shares of its samples that name a reason).

Regions follow the kernel's own barriers, so they name its steps (e.g. the scores, the softmax, P . V of one
stage) in the order the compiler laid them out. ``--regions_csv`` and ``--opcodes_csv`` also write the tables as CSV
(the opcode one whole, not only its first 20 rows).
Only the page's first function is read (a page holds one kernel launch).
"""

import argparse
import collections
import csv
import re
import sys
from typing import Dict, List, NamedTuple

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
BARRIERS = ("BAR.SYNC", "BAR.ARV", "BAR.RED")


class Instruction(NamedTuple):
    source: str
    samples: float
    executed: float
    stalls: Dict[str, float]  # stall reason (the column name without "stall_") -> samples


class Region(NamedTuple):
    """Instructions first..last (indices on the page) and their sums."""

    first: int
    last: int
    samples: float
    executed: float
    stalls: Dict[str, float]


def _number(text: str, where: str) -> float:
    if text in ("", "-"):
        return 0.0
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"{where}: expected a number, got {text!r}") from None


def read_instructions(path: str) -> List[Instruction]:
    """The instructions of the page at ``path``, in the page's order. Raises ValueError when it has no header
    row (one starting with "Address"), lacks the samples, executed or source columns, has a row of another
    length or a non-numeric count, or holds no instruction."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    starts = [i for i, row in enumerate(rows) if row and row[0] == "Address"]
    if not starts:
        raise ValueError(f"{path}: no 'Address' header row: not an ncu --page source --csv export")
    header = rows[starts[0]]
    missing = [c for c in ("Source", SAMPLES, EXECUTED) if c not in header]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing (export with --print-source sass)")
    column = {name: i for i, name in enumerate(header)}
    reasons = [name for name in header if name.startswith("stall_") and "(Not Issued)" not in name]
    instructions = []
    for number, row in enumerate(rows[starts[0] + 1:], start=starts[0] + 2):
        if row and row[0] == "Address":
            break  # a second function's table
        if not row or row[0] in ("Kernel Name", "Function Name"):
            continue
        where = f"{path}: row {number}"
        if len(row) != len(header):
            raise ValueError(f"{where}: {len(row)} columns, the header has {len(header)}")
        instructions.append(Instruction(
            source=row[column["Source"]].strip(),
            samples=_number(row[column[SAMPLES]], where), executed=_number(row[column[EXECUTED]], where),
            stalls={name[len("stall_"):]: _number(row[column[name]], where) for name in reasons}))
    if not instructions:
        raise ValueError(f"{path}: no instruction rows")
    return instructions


def opcode(source: str) -> str:
    """The mnemonic of a SASS line without its predicate and modifiers: '@!P0 BAR.SYNC 0x0' -> 'BAR'."""
    words = re.sub(r"^@!?U?P\w+\s+", "", source).split()
    return words[0].split(".")[0] if words else ""


def by_opcode(instructions: List[Instruction]) -> Dict[str, List[float]]:
    """Opcode -> [samples, executed], largest sample count first."""
    totals = collections.defaultdict(lambda: [0.0, 0.0])
    for instruction in instructions:
        total = totals[opcode(instruction.source)]
        total[0] += instruction.samples
        total[1] += instruction.executed
    return dict(sorted(totals.items(), key=lambda item: -item[1][0]))


def regions(instructions: List[Instruction]) -> List[Region]:
    """The instructions split after each barrier; each region ends with its barrier."""
    result, start = [], 0
    for i, instruction in enumerate(instructions):
        if any(barrier in instruction.source for barrier in BARRIERS) or i == len(instructions) - 1:
            part = instructions[start:i + 1]
            stalls = collections.Counter()
            for member in part:
                stalls.update(member.stalls)
            result.append(Region(start, i, sum(m.samples for m in part), sum(m.executed for m in part), dict(stalls)))
            start = i + 1
    return result


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description="Where a kernel's time goes, from an ncu SASS source page.")
    parser.add_argument("page", help="the CSV of `ncu --import R.ncu-rep --csv --page source --print-source sass`")
    parser.add_argument("--regions_csv", help="also write the region table to this CSV")
    parser.add_argument("--opcodes_csv", help="also write the opcode table to this CSV")
    args = parser.parse_args(argv[1:])
    instructions = read_instructions(args.page)
    samples = sum(i.samples for i in instructions) or 1.0
    executed = sum(i.executed for i in instructions) or 1.0
    print(f"{len(instructions)} instructions, {samples:.0f} stall samples, {executed:.4g} executed (warp level)")
    opcodes = [{"opcode": name, "samples_pct": round(100 * s / samples, 1), "executed_pct": round(100 * e / executed, 1)}
               for name, (s, e) in by_opcode(instructions).items()]
    print(f"{'opcode':<12} {'samples %':>9} {'executed %':>10}")
    for row in opcodes[:20]:
        print(f"{row['opcode']:<12} {row['samples_pct']:9.1f} {row['executed_pct']:10.1f}")
    table = []
    for region in regions(instructions):
        top = sorted(region.stalls.items(), key=lambda item: -item[1])[:3]
        stall_total = sum(region.stalls.values()) or 1.0
        table.append({
            "first_line": region.first, "last_line": region.last,
            "samples_pct": round(100 * region.samples / samples, 1),
            "executed_pct": round(100 * region.executed / executed, 1),
            "top_stalls": "; ".join(f"{name} {100 * value / stall_total:.0f}%" for name, value in top),
        })
    print(f"{'lines':>11} {'samples %':>9} {'executed %':>10}  top stalls (shares of the region's samples by reason)")
    for row in table:
        if row["samples_pct"] >= 1.0:
            print(f"{row['first_line']:>5}-{row['last_line']:<5} {row['samples_pct']:9.1f} {row['executed_pct']:10.1f}  "
                  f"{row['top_stalls']}")
    for path, rows in ((args.regions_csv, table), (args.opcodes_csv, opcodes)):
        if path:
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
