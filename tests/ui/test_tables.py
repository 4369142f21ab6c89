"""ui.tables: headers in words with units, no None cells, figures rounded, counts that agree."""

import math

import pandas as pd

from ui.tables import MISSING, cell_text, column_widths, counted, header, percent_text, readable


def test_headers_in_words_with_units():
    assert header("kv_all_users_GB") == "KV all users (GB)"
    assert header("usable_per_gpu_GB") == "Usable per GPU (GB)"
    assert header("logical_block") == "Logical block"
    assert header("mean wait (s)") == "Mean wait (s)"
    assert header("gpu") == "GPU" and header("TP") == "TP"


def test_cells_round_and_never_say_none():
    assert cell_text(None) == MISSING and cell_text(math.nan) == MISSING
    assert cell_text(1542352) == "1,542,352" and cell_text(1073.74) == "1,073.7"
    assert cell_text(0.123456789) == "0.123" and cell_text(5.0) == "5"
    assert cell_text(0.065, percent=True) == "6.5" and cell_text(True) == "yes"


def test_readable_keeps_the_numbers_for_the_csv():
    table = readable([{"kv_GiB": 10.123456, "utilisation": 0.0625, "replication": None}],
                     percent=("utilisation",))
    assert list(table.shown.columns) == ["KV (GiB)", "Utilisation (%)", "Replication"]
    assert table.shown.iloc[0].tolist() == ["10.1", "6.2", MISSING]
    csv = pd.read_csv(__import__("io").BytesIO(table.csv()))
    assert csv["KV (GiB)"][0] == 10.123456 and csv["Utilisation (%)"][0] == 6.25


def test_counted_agrees_with_the_count():
    assert counted(1, "request") == "1 request" and counted(2, "request") == "2 requests"
    assert counted(1, "request was", "requests were") == "1 request was"
    assert counted(1000, "GPU") == "1,000 GPUs"


def test_percent_text_is_the_one_style_for_shares():
    # 2,048 of 32,768 slots hold tokens: 6.25 %, one decimal; 99.6 % as the paged snapshot shows.
    assert percent_text(2048 / 32768) == "6.2 %" and percent_text(0.996) == "99.6 %"
    assert percent_text(0.9, 0) == "90 %" and percent_text(None) == MISSING


def test_widths_only_where_the_grids_own_sizing_would_cut():
    # 12 rows: the grid measures rows 0-9 and 11, so a long status in row 10 would be cut to "unsupp…".
    status = ["ok"] * 12
    status[10] = "unsupported"
    note = [""] * 11 + ["x" * 80]  # sampled (last row), but 80 × 7.5 px + 20 = 620 px, over the 500 px cap
    frame = pd.DataFrame({"Status": status, "Note": note, "Seconds": ["0.5"] * 12, "Kernel": ["Triton paged decode"] * 12})
    widths = column_widths(frame)
    assert widths["Status"]["width"] == math.ceil(7.5 * len("unsupported")) + 20
    assert widths["Note"]["width"] == 620
    # "Seconds" is wider than its cells: the grid's width leaves no room for the header's icon.
    assert widths["Seconds"]["width"] == math.ceil(7.5 * 7) + 20 + 28
    assert "Kernel" not in widths  # the same text in every row, longer than its header: the grid's width fits
