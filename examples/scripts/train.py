"""Train and score a model: a team's own training script, no Iceberg.

    python3 train.py DATA_CSV

trains a logistic regression on the first 75% of the rows, scores it on the
rest, and scores the model in production (the folder the pipeline's publish
step copies a deployed model to) on the same rows, so the gate compares
like with like. Outputs (JSON to $RETRAIN_OUTPUTS): model_dir, candidate
({"auc": ...}) and baseline ({"auc": ...}, or null before the first deploy).
"""
import csv
import json
import math
import os
import sys

data = sys.argv[1]
with open(data) as f:
    rows = [(float(r["activity"]), float(r["quality"]), int(r["label"])) for r in csv.DictReader(f)]
cut = len(rows) * 3 // 4
train, held_out = rows[:cut], rows[cut:]

w = [0.0, 0.0, 0.0]  # bias, activity, quality
for epoch in range(5):
    for x1, x2, y in train:
        p = 1 / (1 + math.exp(-(w[0] + w[1] * x1 + w[2] * x2)))
        g = p - y
        w = [w[0] - 0.05 * g, w[1] - 0.05 * g * x1, w[2] - 0.05 * g * x2]


def auc(weights):
    scored = sorted((weights[0] + weights[1] * x1 + weights[2] * x2, y) for x1, x2, y in held_out)
    pos = sum(y for _, y in scored)
    neg = len(scored) - pos
    rank_sum = sum(i + 1 for i, (_, y) in enumerate(scored) if y)
    return round((rank_sum - pos * (pos + 1) / 2) / (pos * neg), 4)


model_dir = os.path.join(os.path.dirname(data), "model")
os.makedirs(model_dir, exist_ok=True)
with open(os.path.join(model_dir, "model.json"), "w") as f:
    json.dump({"weights": w}, f)

production = os.path.join(os.environ.get("TMPDIR", "/tmp"), "retrain-scripts", "production", "model.json")
baseline = None
if os.path.exists(production):
    with open(production) as f:
        baseline = {"auc": auc(json.load(f)["weights"])}
candidate = {"auc": auc(w)}
print(f"candidate {candidate}, production {baseline}")
with open(os.environ["RETRAIN_OUTPUTS"], "w") as f:
    json.dump({"model_dir": model_dir, "candidate": candidate, "baseline": baseline}, f)
