#!/usr/bin/env python3
"""A retrain command evaluator for the models train.py writes.

It implements retrain's evaluator contract (see README.md), needing only
torch and numpy. An evaluate node with `evaluator: command` runs it once per
model it scores, with

* RETRAIN_MODEL_DIR: the model's folder (train.py's model.pt and meta.json);
* RETRAIN_EVAL_DATA: the data to score, in the npy layout (give the node
  `data_format: npy`);
* RETRAIN_PREDICTIONS_OUT: where it writes predictions.npy, float32 [rows],
  the probability of label 1 of each row in the data's order (from which
  the node computes its own metrics, as for the builtin's models);
* RETRAIN_METRICS_OUT: where it writes
  {"rows": N, "overall": {"auc", "log_loss"}, "slices": {value: {...}}};
* RETRAIN_MODEL_ROLE: candidate or baseline (only logged here).
"""

import json
import os
import sys

import numpy as np
import torch

import fm


def metrics(z, labels):
    return {"rows": int(len(labels)), "auc": fm.auc(z.numpy(), labels), "log_loss": fm.log_loss(z, labels)}


def main():
    env = os.environ
    missing = [k for k in ("RETRAIN_MODEL_DIR", "RETRAIN_EVAL_DATA", "RETRAIN_METRICS_OUT") if not env.get(k)]
    if missing:
        sys.exit(f"{', '.join(missing)} not set")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, meta = fm.load_model(env["RETRAIN_MODEL_DIR"], device)
    transforms = meta.get("transforms")
    data = fm.Data(env["RETRAIN_EVAL_DATA"], meta["buckets"], meta["dense"], meta["sparse"],
                   transforms if isinstance(transforms, dict) else None)
    print(f"scoring {data.rows} rows with the {env.get('RETRAIN_MODEL_ROLE', 'candidate')} model "
          f"{env['RETRAIN_MODEL_DIR']} ({meta['steps'] if 'steps' in meta else '?'} steps)", flush=True)
    z = fm.predict(model, data, device)

    out = env.get("RETRAIN_PREDICTIONS_OUT")
    if out:
        if os.path.isdir(out):
            out = os.path.join(out, "predictions.npy")
        # np.save to an open file: given a name, it would add ".npy".
        with open(out + ".tmp", "wb") as f:
            np.save(f, torch.sigmoid(z).numpy().astype(np.float32))
        os.replace(out + ".tmp", out)

    overall = metrics(z, data.label)
    result = {"rows": overall.pop("rows"), "overall": overall}
    slices = data.schema.get("slices")
    slice_file = os.path.join(env["RETRAIN_EVAL_DATA"], "slice.npy")
    if slices and os.path.exists(slice_file):
        codes = np.load(slice_file)
        result["slices"] = {}
        for i, value in enumerate(slices):
            rows = np.flatnonzero(codes == i)
            if len(rows):
                result["slices"][value] = metrics(z[torch.from_numpy(rows)], data.label[rows])
    with open(env["RETRAIN_METRICS_OUT"], "w") as f:
        json.dump(result, f)  # NaN (an AUC without both classes) is written bare
    print(json.dumps(result["overall"]), flush=True)


if __name__ == "__main__":
    main()
