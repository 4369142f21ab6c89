"""ui.tables: headers in words with units, no None cells, figures rounded, counts that agree."""

import math

import pandas as pd

from ui.tables import MISSING, cell_text, counted, header, readable


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
