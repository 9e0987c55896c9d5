"""tools/ncu_sass_summary.py on a small SASS source page written as Nsight Compute exports it."""

import csv
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
spec = importlib.util.spec_from_file_location("ncu_sass_summary", ROOT / "tools" / "ncu_sass_summary.py")
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)

HEADER = ["Address", "Source", summary.SAMPLES, "Warp Stall Sampling (Not-issued Samples)", summary.EXECUTED,
          "stall_barrier", "stall_short_sb", "stall_short_sb (Not Issued)"]
# (source, samples, executed, barrier stalls, short scoreboard stalls)
LINES = [
    ("LDS R1, [R2]", 10, 100, 0, 10),
    ("FADD.FTZ R3, R1, R1", 30, 100, 0, 30),
    ("@!P0 BAR.SYNC.DEFER_BLOCKING 0x0", 20, 50, 20, 0),
    ("HMMA.16816.F32.BF16 R4, R8, R12, R4", 25, 1200, 5, 20),
    ("FADD R5, R4, R4", 15, 550, 0, 15),
]


def _write_page(path, lines=LINES):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "void kernel(int)"])
        writer.writerow(HEADER)
        for i, (source, samples, executed, barrier, short) in enumerate(lines):
            writer.writerow([hex(0x1000 + 16 * i), "      " + source, samples, samples, f"{executed:,}", barrier, short,
                             short])


def test_opcodes_and_regions_add_up(tmp_path):
    page = tmp_path / "page.csv"
    _write_page(page)
    instructions = summary.read_instructions(str(page))
    assert [i.executed for i in instructions] == [100, 100, 50, 1200, 550]  # "1,200" read as a number
    assert summary.by_opcode(instructions) == {"FADD": [45, 650], "HMMA": [25, 1200], "BAR": [20, 50], "LDS": [10, 100]}
    first, second = summary.regions(instructions)
    assert (first.first, first.last, first.samples, first.executed) == (0, 2, 60, 250)  # ends with its barrier
    assert first.stalls == {"barrier": 20, "short_sb": 40}  # the Not Issued columns are left out
    assert (second.first, second.last, second.samples, second.executed) == (3, 4, 40, 1750)


def test_main_writes_the_region_table(tmp_path, capsys):
    page, table = tmp_path / "page.csv", tmp_path / "regions.csv"
    _write_page(page)
    assert summary.main(["ncu_sass_summary.py", str(page), f"--regions_csv={table}"]) == 0
    rows = list(csv.DictReader(open(table)))
    assert [(r["first_line"], r["samples_pct"], r["executed_pct"]) for r in rows] == [("0", "60.0", "12.5"),
                                                                                    ("3", "40.0", "87.5")]
    assert rows[0]["top_stalls"] == "short_sb 67%; barrier 33%"
    assert "FADD" in capsys.readouterr().out


@pytest.mark.parametrize("header", [["Kernel Name", "x"], ["Address", "Source", summary.EXECUTED]])
def test_a_page_of_another_kind_is_refused(tmp_path, header):
    page = tmp_path / "page.csv"
    page.write_text(",".join(header) + "\n")
    with pytest.raises(ValueError, match="not an ncu|missing"):
        summary.read_instructions(str(page))
