"""Prepare one day's training data: a team's own prep script, no Iceberg.

    python3 prep.py DATE

writes $TMPDIR/retrain-scripts/DATE/data.csv (synthetic clicks: two
features and a label, deterministic per date) and hands the path and the
row count to the next node as structured outputs: a JSON object written to
the file $RETRAIN_OUTPUTS names.
"""
import csv
import json
import math
import os
import random
import sys

date = sys.argv[1]
work = os.path.join(os.environ.get("TMPDIR", "/tmp"), "retrain-scripts", date)
os.makedirs(work, exist_ok=True)
rng = random.Random(date)
path = os.path.join(work, "data.csv")
rows = 4000
with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["activity", "quality", "label"])
    for _ in range(rows):
        activity, quality = rng.gauss(0, 1), rng.gauss(0, 1)
        p = 1 / (1 + math.exp(-(0.9 * activity + 0.6 * quality - 1)))
        out.writerow([round(activity, 4), round(quality, 4), int(rng.random() < p)])
print(f"wrote {rows} rows for {date} to {path}")
with open(os.environ["RETRAIN_OUTPUTS"], "w") as f:
    json.dump({"data": path, "rows": rows}, f)
