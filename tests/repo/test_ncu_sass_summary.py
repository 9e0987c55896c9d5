"""tools/ncu_sass_summary.py on a small SASS source page written as Nsight Compute exports it."""

import csv
import importlib.util
import pathlib
import re

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


def _write_page(path, lines=LINES, after=()):
    """The page of LINES, then the rows ``after`` (another function's table, a malformed row)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "void kernel(int)"])
        writer.writerow(HEADER)
        for i, (source, samples, executed, barrier, short) in enumerate(lines):
            writer.writerow([hex(0x1000 + 16 * i), "      " + source, samples, samples, f"{executed:,}", barrier, short,
                             short])
        writer.writerows(after)


def test_opcodes_and_regions_add_up(tmp_path):
    page = tmp_path / "page.csv"
    _write_page(page)
    instructions = summary.read_instructions(str(page))
    assert [i.executed for i in instructions] == [100, 100, 50, 1200, 550]  # "1,200" read as a number
    assert list(summary.by_opcode(instructions).items()) == [("FADD", [45, 650]), ("HMMA", [25, 1200]), ("BAR", [20, 50]),
                                                             ("LDS", [10, 100])]  # most samples first
    first, second = summary.regions(instructions)
    assert (first.first, first.last, first.samples, first.executed) == (0, 2, 60, 250)  # ends with its barrier
    assert first.stalls == {"barrier": 20, "short_sb": 40}  # the Not Issued columns are left out
    assert (second.first, second.last, second.samples, second.executed) == (3, 4, 40, 1750)


def test_main_prints_and_writes_the_region_table(tmp_path, capsys):
    page, table, opcodes = tmp_path / "page.csv", tmp_path / "regions.csv", tmp_path / "opcodes.csv"
    _write_page(page)
    assert summary.main(["ncu_sass_summary.py", str(page), f"--regions_csv={table}", f"--opcodes_csv={opcodes}"]) == 0
    with open(opcodes) as f:
        assert [(r["opcode"], r["samples_pct"], r["executed_pct"]) for r in csv.DictReader(f)] == [
            ("FADD", "45.0", "32.5"), ("HMMA", "25.0", "60.0"), ("BAR", "20.0", "2.5"), ("LDS", "10.0", "5.0")]
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert [(r["first_line"], r["samples_pct"], r["executed_pct"]) for r in rows] == [("0", "60.0", "12.5"),
                                                                                    ("3", "40.0", "87.5")]
    assert rows[0]["top_stalls"] == "short_sb 67%; barrier 33%"
    out = capsys.readouterr().out
    assert re.search(r"^ *lines ", out, re.M)  # tools/gpu_routine.sh prints from this line on
    assert re.search(r"^ +0-2 +60\.0 +12\.5  short_sb 67%; barrier 33%$", out, re.M)
    assert re.search(r"^FADD +45\.0 +32\.5$", out, re.M)


def test_a_second_function_table_ends_the_page(tmp_path):
    page = tmp_path / "page.csv"
    _write_page(page, after=[["Kernel Name", "void other()"], HEADER, ["0x2000", "EXIT", "1", "1", "1", "0", "0", "0"]])
    assert len(summary.read_instructions(str(page))) == len(LINES)


@pytest.mark.parametrize("rows, match", [
    ([["Kernel Name", "x"]], "no 'Address' header"),
    ([["Address", "Source", summary.EXECUTED]], r"\['Warp Stall Sampling \(All Samples\)'\] missing"),
    ([HEADER], "no instruction rows"),
    ([HEADER, ["0x1000", "NOP"]], "row 2: 2 columns, the header has 8"),
    ([HEADER, ["0x1000", "NOP", "n/a", "0", "1", "0", "0", "0"]], "row 2: expected a number, got 'n/a'"),
])
def test_a_page_it_cannot_read_is_refused(tmp_path, rows, match):
    page = tmp_path / "page.csv"
    with open(page, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(ValueError, match=match):
        summary.read_instructions(str(page))


def test_an_unknown_flag_is_refused(tmp_path):
    page = tmp_path / "page.csv"
    _write_page(page)
    with pytest.raises(SystemExit) as exit_info:
        summary.main(["ncu_sass_summary.py", str(page), "--regions-csv=x.csv"])
    assert exit_info.value.code == 2
